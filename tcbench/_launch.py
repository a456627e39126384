"""The launcher of a data-parallel job: torchrun's agent in this process, the ranks' messages forwarded.

Run by the runner as ``python -m tcbench._launch <fd> <spec-json> <run-dir>`` for a JobSpec with nproc > 1.
torchrun (``torch.distributed.run``) starts its ranks with ``close_fds``, so the job's pipe cannot reach them:
the ranks write their JSON lines to a FIFO in the run folder (``TCBENCH_CHANNEL``; one ``write()`` of at most
PIPE_BUF bytes per batch of whole lines keeps lines whole) and a thread here copies the FIFO into the pipe.

Nothing is left behind: this process dies with its parent (PR_SET_PDEATHSIG), and every rank dies with this
process (its parent: the same call in the worker), although torchrun gives each rank a session of its own — so
a SIGKILLed runner, a kernel restart or a stall leaves no rank running. SIGTERM (a stop) reaches torchrun, which
stops its ranks itself.
"""

from __future__ import annotations

import os
import select
import sys
import threading


def _forward(src: int, dst: int, done: threading.Event) -> None:
    """Copy the FIFO into the pipe until ``done`` is set and nothing is left to read."""
    while True:
        ready, _, _ = select.select([src], [], [], 0.1)
        if ready:
            data = os.read(src, 65536)
            try:
                while data:
                    data = data[os.write(dst, data):]
            except OSError:   # the runner is gone: nobody to tell
                return
        elif done.is_set():
            return


def torchrun_args(spec_json: str, nproc: int, run_dir: str) -> list[str]:
    """torchrun's command line for the job: one machine, ``nproc`` ranks, no restarts, tcbench's worker."""
    return ["--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0", "-m", "tcbench._worker", spec_json,
            "-1", run_dir]


def main(argv: list[str]) -> int:
    from ._spec import JobSpec
    from ._worker import _die_with_parent

    _die_with_parent()
    fd, spec_json, run_dir = int(argv[0]), argv[1], argv[2]
    spec = JobSpec.from_json(spec_json)
    fifo = os.path.join(run_dir, "channel.fifo")
    os.mkfifo(fifo, 0o600)
    src = os.open(fifo, os.O_RDWR)   # O_RDWR never blocks, and the FIFO never reads EOF while this process lives
    done = threading.Event()
    forwarder = threading.Thread(target=_forward, args=(src, fd, done), daemon=True, name="tcbench-forward")
    forwarder.start()
    os.environ.update(TCBENCH_CHANNEL=fifo, TCBENCH_PARENT_PID=str(os.getpid()))
    from torch.distributed.run import main as torchrun

    code = 0
    try:
        torchrun(torchrun_args(spec_json, spec.nproc, run_dir))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - ChildFailedError: the failing rank has sent its own end
        print(f"[tcbench] torchrun: {type(exc).__name__}: {exc}", flush=True)
        code = 1
    finally:
        done.set()
        forwarder.join(10)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

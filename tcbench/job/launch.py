"""The launcher of a data-parallel job: torchrun's agent in this process, the ranks' messages forwarded.

Run by the runner as ``python -m tcbench.job.launch <fd> <spec-json> <run-dir>`` for a JobSpec with nproc > 1.
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
from typing import TYPE_CHECKING
from tcbench.core.spec import JobSpec
from tcbench.job.process_tools import die_with_parent
from tcbench.job.protocol import Phase, encode

if TYPE_CHECKING:
    from tcbench.core.spec import JobSpec


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


def torchrun_args(spec: "JobSpec", spec_json: str, run_dir: str) -> list[str]:
    """torchrun's command line for the job: ``nproc`` ranks on this machine, no restarts, tcbench's worker.
    One machine: a standalone rendezvous. Several: the static rendezvous at node 0's ``rdzv_endpoint`` (this
    machine's ``node_rank`` fixes its ranks, so node 0 holds global rank 0), waiting at most ``stall_s`` for
    the other nodes."""
    if spec.nnodes == 1:
        where = ["--standalone"]
    else:
        host, _, port = spec.rdzv_endpoint.rpartition(":")
        where = [f"--nnodes={spec.nnodes}", f"--node-rank={spec.node_rank}", f"--master-addr={host.strip('[]')}",
                 f"--master-port={port}", f"--rdzv-conf=timeout={max(1, int(spec.stall_s))}"]
    return [*where, f"--nproc-per-node={spec.nproc}", "--max-restarts=0", "-m", "tcbench.job.worker", spec_json,
            "-1", run_dir]


def main(argv: list[str]) -> int:
    die_with_parent()
    fd, spec_json, run_dir = int(argv[0]), argv[1], argv[2]
    spec = JobSpec.from_json(spec_json)
    fifo = os.path.join(run_dir, "channel.fifo")
    os.mkfifo(fifo, 0o600)
    src = os.open(fifo, os.O_RDWR)   # O_RDWR never blocks, and the FIFO never reads EOF while this process lives
    done = threading.Event()
    forwarder = threading.Thread(target=_forward, args=(src, fd, done), daemon=True, name="tcbench-forward")
    forwarder.start()
    os.environ.update(TCBENCH_CHANNEL=fifo, TCBENCH_PARENT_PID=str(os.getpid()))
    if spec.nnodes > 1:   # the stall clock's message names what the job waits for
        os.write(fd, encode(Phase(f"waiting for {spec.nnodes} nodes at {spec.rdzv_endpoint} "
                                  f"(this is node {spec.node_rank})")).encode())
    from torch.distributed.run import main as torchrun

    code = 0
    try:
        torchrun(torchrun_args(spec, spec_json, run_dir))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - ChildFailedError: the failing rank has sent its own end
        print(f"[tcbench] torchrun: {type(exc).__name__}: {exc}", flush=True)
        code = 1
    finally:
        done.set()
        forwarder.join(10)
        os.close(src)
        try:   # a named pipe left in the run folder would hang a tool that reads every file under the home
            os.unlink(fifo)
        except OSError:
            pass
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The warm launcher's own behaviour, without torch: a launcher process that serves without its imports forks
children that become the job (their own process group, the job's environment, folder and log), reports their exits,
refuses to fork with a second thread, and takes its children with it when its control socket closes.

A child here blocks on its first message (the job's pipe is full) or fails on a spec that is not JSON: the worker
never gets to import torch.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tcbench.host.processes import _leftovers, pid_alive
from tcbench.job.zygote import RUN_DIR, launcher_environ, receive, send

SERVE = textwrap.dedent("""
    import socket, sys, threading, time
    from tcbench.job.zygote import Launcher
    if sys.argv[2] == "thread":   # a second thread, as an OpenMP pool or a library's worker would be
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    Launcher(socket.socket(fileno=int(sys.argv[1]))).serve()
""")


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def launcher(tmp_path: Path):
    """A launcher process without the imports (SERVE): (its control socket, its Popen, a job environment)."""
    def start(extra_thread: bool = False):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "TCBENCH_PARENT_PID":
               str(os.getpid())}
        proc = subprocess.Popen([sys.executable, "-c", SERVE, str(theirs.fileno()), "thread" if extra_thread else "-"],
                                env=launcher_environ(env), pass_fds=(theirs.fileno(),), start_new_session=True,
                                stdin=subprocess.DEVNULL)
        theirs.close()
        started.append((ours, proc))
        return ours, proc, env

    started: list = []
    yield start
    for sock, proc in started:
        sock.close()
        proc.wait(timeout=30)


def _request(sock: socket.socket, tmp_path: Path, env: dict, spec: str,
             full_pipe: bool) -> tuple[int, Path, Path, int]:
    """Ask for a job whose message pipe is full (it blocks on its first message) or not; (pid, run dir, log, the
    pipe's read end: open while the child lives)."""
    run_dir = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    log = run_dir / "worker.log"
    read_fd, write_fd = os.pipe()
    if full_pipe:
        os.set_blocking(write_fd, False)
        while True:
            try:
                os.write(write_fd, b"x" * 65536)
            except BlockingIOError:
                break
        os.set_blocking(write_fd, True)
    with open(log, "w") as f:
        send(sock, {"id": 7, "spec": spec, "run_dir": str(run_dir), "cwd": str(run_dir),
                    "env": {**env, RUN_DIR: str(run_dir), "TCBENCH_MARK": "job"}}, [write_fd, f.fileno()])
    os.close(write_fd)
    answer, _ = receive(sock)
    assert answer == {"id": 7, "pid": answer["pid"]}, answer
    return answer["pid"], run_dir, log, read_fd


def test_the_standard_library_comes_before_the_callers_folders_but_site_packages_after_them():
    import sysconfig

    from tcbench.job.process_tools import stdlib_first

    std, dyn = sysconfig.get_paths()["stdlib"], os.path.join(sysconfig.get_paths()["platstdlib"], "lib-dynload")
    site = sysconfig.get_paths()["purelib"]
    zipped = os.path.join(os.path.dirname(std), f"python{sys.version_info.major}{sys.version_info.minor}.zip")
    path = ["/run/dir", "/home/me/project", "/home/me/lib.zip", zipped, std, dyn, site]
    assert stdlib_first(path) == ["/run/dir", zipped, std, dyn, "/home/me/project", "/home/me/lib.zip", site]
    assert stdlib_first(stdlib_first(path)) == stdlib_first(path)


def test_the_wire_carries_one_message_and_its_descriptors():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_fd, write_fd = os.pipe()
    send(a, {"id": 1, "env": {"K": "v" * 10_000}}, [write_fd])
    os.close(write_fd)
    message, fds = receive(b)
    assert message == {"id": 1, "env": {"K": "v" * 10_000}} and len(fds) == 1
    os.write(fds[0], b"through")
    os.close(fds[0])
    assert os.read(read_fd, 100) == b"through"
    a.close()
    assert receive(b) == (None, [])
    os.close(read_fd)
    b.close()


def test_the_launchers_environment_keeps_the_run_folder_slot_last():
    env = launcher_environ({RUN_DIR: "/old", "A": "1", "Z": "2"})
    assert list(env)[-1] == RUN_DIR and set(env[RUN_DIR]) == {"-"} and env["A"] == "1"


def test_the_launcher_starts_without_the_threads_libraries_start_at_import_unless_the_jobs_ask():
    # OpenBLAS's pool (numpy) and pyarrow's jemalloc purger (pandas imports pyarrow where installed: on an H200
    # machine that thread alone kept every job from being forked)
    env = launcher_environ({"A": "1"})
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["JE_ARROW_MALLOC_CONF"] == "background_thread:false"
    asked = launcher_environ({"OPENBLAS_NUM_THREADS": "4", "JE_ARROW_MALLOC_CONF": "narenas:2"})
    assert asked["OPENBLAS_NUM_THREADS"] == "4" and asked["JE_ARROW_MALLOC_CONF"] == "narenas:2"


def test_a_launcher_with_a_second_thread_refuses_to_fork_and_names_its_threads_but_the_cuda_drivers_idle_one():
    code = ("import ctypes, threading\n"
            "from tcbench.job.zygote import unsafe_state\n"
            "print(unsafe_state() or 'safe')\n"
            "go = threading.Event()\n"
            "def named():\n"
            "    ctypes.CDLL(None).prctl(15, b'lib_bg_thd')   # PR_SET_NAME, as a library's thread names itself\n"
            "    go.wait()\n"
            "def driver():   # the CUDA driver's idle thread, as NVML's device count starts it on a GPU machine\n"
            "    ctypes.CDLL(None).prctl(15, b'cuda00001800007')\n"
            "    go.wait()\n"
            "threading.Thread(target=driver).start()\n"
            "import time; time.sleep(0.2)\n"
            "print(unsafe_state() or 'safe')\n"
            "threading.Thread(target=named).start()\n"
            "time.sleep(0.2)\n"
            "print(unsafe_state())\n"
            "go.set()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=launcher_environ({**os.environ, "OMP_NUM_THREADS": "1"}))
    assert out.returncode == 0, out.stderr[-2000:]
    before, beside_driver, after = out.stdout.strip().splitlines()
    assert before == "safe" and beside_driver == "safe"
    assert after.startswith("the launcher has 3 threads (") and after.endswith(
        ", cuda00001800007, lib_bg_thd); forking is only safe with one")


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="needs torch_xla (2.9 only)")
def test_a_launcher_that_imported_torch_xla_forks_until_it_creates_its_pjrt_runtime():
    """The XLA jobs' launcher imports torch_xla: no runtime, no thread, safe to fork; a PJRT client is not."""
    code = ("from tcbench.job import zygote\n"
            "import torch_xla, torch_xla.runtime\n"
            "print(zygote._xla_runtime_initialised(), zygote.unsafe_state() or 'safe')\n"
            "torch_xla.device()\n"
            "print(zygote._xla_runtime_initialised(), bool(zygote.unsafe_state()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=launcher_environ({**os.environ, "OMP_NUM_THREADS": "1", "PJRT_DEVICE": "CPU",
                                               "USE_TORCH_XLA": "1"}))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["False safe", "True True"], out.stdout


def test_a_forked_child_becomes_the_job_and_dies_with_the_launchers_socket(launcher, tmp_path):
    sock, proc, env = launcher()
    pid, run_dir, log, read_fd = _request(sock, tmp_path, env, '{"model": "gpt2"}', full_pipe=True)
    child = psutil.Process(pid)
    assert child.ppid() == proc.pid and os.getpgid(pid) == pid and os.getsid(pid) == pid
    assert Path(child.cwd()) == run_dir and os.readlink(f"/proc/{pid}/fd/1") == str(log)
    # /proc/<pid>/environ names the run folder: a dead job's leftovers are found by it
    assert child.environ()[RUN_DIR] == str(run_dir) and _leftovers(pid, str(run_dir)) == [pid]
    sock.close()   # the runner is gone: the launcher ends its children and exits
    assert proc.wait(timeout=30) == 0 and _gone(pid)
    os.close(read_fd)


def test_a_child_that_fails_is_reported_with_its_exit_code_and_its_log(launcher, tmp_path):
    sock, proc, env = launcher()
    pid, _, log, read_fd = _request(sock, tmp_path, env, "not a spec", full_pipe=False)
    exited, _ = receive(sock)
    assert exited == {"exited": pid, "returncode": 1}
    assert "JSONDecodeError" in log.read_text()
    os.close(read_fd)


def test_a_launcher_with_a_second_thread_refuses_to_fork(launcher, tmp_path):
    sock, proc, env = launcher(extra_thread=True)
    read_fd, write_fd = os.pipe()
    send(sock, {"id": 3, "spec": "{}", "run_dir": str(tmp_path), "cwd": str(tmp_path), "env": env},
         [write_fd, write_fd])
    answer, _ = receive(sock)
    assert answer["id"] == 3 and "2 threads" in answer["error"] and "pid" not in answer
    os.close(read_fd)
    os.close(write_fd)

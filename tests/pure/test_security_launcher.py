"""The launcher and the environment: every value checked up front, the port held, no orphans.

No GPU: workers are small Python scripts; every subprocess has a hard timeout.
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cugather.distributed import comm, run
from cugather.distributed.rendezvous import job_timeout, read_env
from cugather.distributed.store import StoreServer

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-secret-job-token-for-tests"
ENV = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
       "CUGATHER_JOB_TOKEN": TOKEN}


# ---------------------------------------------------------------- finding 8: variables
@pytest.mark.parametrize("value", ["inf", "nan", "-5", "0", "abc", "-inf"])
def test_cugather_timeout_is_checked_and_named(value):
    pattern = f"CUGATHER_TIMEOUT must be a finite number of seconds > 0, got '{value}'"
    with pytest.raises(ValueError, match=pattern):
        job_timeout(None, {"CUGATHER_TIMEOUT": value})
    with pytest.raises(ValueError, match=pattern):
        read_env(dict(ENV, CUGATHER_TIMEOUT=value))
    with pytest.raises(ValueError, match=pattern):  # before CuPy or any GPU is touched
        comm.init(environ=dict(ENV, CUGATHER_TIMEOUT=value))


def test_timeouts_given_as_arguments_are_checked():
    assert job_timeout(None, {}) == 300 and job_timeout(None, {"CUGATHER_TIMEOUT": "2.5"}) == 2.5
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout must be"):
            job_timeout(bad, {})
        with pytest.raises(ValueError, match="io_timeout must be"):  # no crash in its thread
            StoreServer("127.0.0.1", 0, TOKEN, io_timeout=bad)
    with pytest.raises(ValueError, match="CUGATHER_STORE_FD is for rank 0 only"):
        read_env(dict(ENV, RANK="1", CUGATHER_STORE_FD="3"))


# ---------------------------------------------------------------- finding 8: options
def _exit_message(argv, monkeypatch, token=None):
    if token is None:
        monkeypatch.delenv("CUGATHER_JOB_TOKEN", raising=False)
    else:
        monkeypatch.setenv("CUGATHER_JOB_TOKEN", token)
    with pytest.raises(SystemExit) as e:
        run.main(argv + ["worker_that_never_starts.py"])
    return str(e.value.code)


@pytest.mark.parametrize("argv,message", [
    (["--master-port", "70000"], "--master-port must be in [1, 65535] (0: a free one), got 70000"),
    (["--master-port", "-1"], "--master-port must be in [1, 65535] (0: a free one), got -1"),
    (["--timeout", "-1"], "--timeout must be a finite number of seconds >= 0, got -1.0"),
    (["--timeout", "nan"], "--timeout must be a finite number of seconds >= 0, got nan"),
    (["--timeout", "inf"], "--timeout must be a finite number of seconds >= 0, got inf"),
    (["--grace", "nan"], "--grace must be a finite number of seconds >= 0, got nan"),
    (["--nnodes", "0"], "--nnodes must be >= 1, got 0"),
    (["--master-addr", "no-such-host.invalid"], "--master-addr 'no-such-host.invalid' does not "
                                                "resolve"),
    (["--master-addr", "192.0.2.1"], "--master-addr 192.0.2.1 is not an address of this host"),
])
def test_launcher_options_are_checked_before_any_worker_starts(argv, message, monkeypatch):
    assert message in _exit_message(["--nproc-per-node", "1"] + argv, monkeypatch)


@pytest.mark.parametrize("token,what", [("", "it is empty"), ("short", "5 characters long")])
def test_several_hosts_need_one_real_token(token, what, monkeypatch):
    text = _exit_message(["--nproc-per-node", "1", "--nnodes", "2", "--master-port", "29999"],
                         monkeypatch, token=token)
    assert "CUGATHER_JOB_TOKEN of at least 16 characters" in text and what in text


def test_a_bad_environment_stops_the_launcher(monkeypatch):
    monkeypatch.setenv("CUGATHER_TIMEOUT", "inf")
    assert "CUGATHER_TIMEOUT must be" in _exit_message(["--nproc-per-node", "1"], monkeypatch)
    monkeypatch.delenv("CUGATHER_TIMEOUT")
    text = _exit_message(["--nproc-per-node", "1"], monkeypatch, token="short")
    assert "CUGATHER_JOB_TOKEN is only 5 characters long" in text


def test_a_bad_master_addr_prints_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cugather.distributed.run", "--nproc-per-node",
                        "1", "--master-addr", "no-such-host.invalid", "x.py"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--master-addr 'no-such-host.invalid' does not resolve" in r.stderr


# ---------------------------------------------------------------- findings 5 and 8: processes
def _launch(tmp_path, body, *args, timeout=60, env=None):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-m", "cugather.distributed.run", *args, str(script)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def test_the_launcher_holds_the_port_it_hands_to_rank_0(tmp_path):
    out = tmp_path / "bind"
    r = _launch(tmp_path, f"""
        import errno, os, socket
        port = int(os.environ["MASTER_PORT"])
        try:
            socket.create_server(("127.0.0.1", port)).close()
            got = "free"
        except OSError as e:
            got = "in use" if e.errno == errno.EADDRINUSE else str(e)
        with open({str(out)!r} + os.environ["RANK"], "w") as f:
            f.write(got + " " + os.environ.get("CUGATHER_STORE_FD", "-"))
        """, "--nproc-per-node", "2")
    assert r.returncode == 0, r.stderr
    zero, one = ((tmp_path / f"bind{q}").read_text().split() for q in range(2))
    assert zero[:2] == ["in", "use"] and zero[2] != "-"  # bound before rank 0 started
    assert one[-1] == "-"  # only rank 0 holds the socket


def test_failures_name_the_global_rank(tmp_path):
    env = dict(os.environ, CUGATHER_JOB_TOKEN=TOKEN)
    r = _launch(tmp_path, """
        import os, sys, time
        if os.environ["LOCAL_RANK"] == "1":
            sys.exit(7)
        time.sleep(60)
        """, "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-port",
                "29999", "--grace", "1", env=env)
    assert r.returncode == 7
    assert "rank 3 exited with status 7" in r.stderr, r.stderr


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_killed_launcher(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        time.sleep(60)
        """))
    launcher = subprocess.Popen([sys.executable, "-m", "cugather.distributed.run",
                                 "--nproc-per-node", "2", str(script)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers)
    finally:
        for w in [int(p.name) for p in pids.iterdir()]:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()


def test_free_port_is_a_free_port():
    port = run.free_port("127.0.0.1")
    with socket.create_server(("127.0.0.1", port)):
        pass

"""The launcher (python -m cugather.distributed.run) and a real rendezvous across processes.

No GPU: the workers are small Python scripts.  Every run has a hard
timeout, so a launcher that fails to stop its children fails the test.
"""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def _launch(tmp_path, body: str, *args, timeout=60):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-m", "cugather.distributed.run", *args, str(script)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_workers_get_torchrun_variables_and_one_token(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    r = _launch(tmp_path, f"""
        import json, os
        keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "CUGATHER_JOB_TOKEN", "GROUP_RANK"]
        with open(os.path.join({str(out)!r}, os.environ["RANK"]), "w") as f:
            json.dump({{k: os.environ.get(k) for k in keys}}, f)
        """, "--nproc-per-node", "3")
    assert r.returncode == 0, r.stderr
    envs = [json.loads((out / str(q)).read_text()) for q in range(3)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} == {e["LOCAL_WORLD_SIZE"] for e in envs}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    tokens = {e["CUGATHER_JOB_TOKEN"] for e in envs}
    assert len(tokens) == 1 and len(tokens.pop()) >= 32


def test_a_failing_rank_stops_the_others_and_its_status_is_returned(tmp_path):
    start = time.monotonic()
    r = _launch(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(7)
        time.sleep(120)
        """, "--nproc-per-node", "3", "--grace", "1")
    assert r.returncode == 7
    assert "rank 1 exited with status 7" in r.stderr
    assert time.monotonic() - start < 30


def test_a_worker_ignoring_sigterm_is_killed(tmp_path):
    r = _launch(tmp_path, """
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.environ["RANK"] == "0":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(120)
        """, "--nproc-per-node", "2", "--grace", "0.5")
    assert r.returncode == 3


def test_overall_timeout(tmp_path):
    start = time.monotonic()
    r = _launch(tmp_path, "import time\ntime.sleep(120)\n", "--nproc-per-node", "2",
                "--timeout", "1", "--grace", "1")
    assert r.returncode == 124
    assert "--timeout" in r.stderr
    assert time.monotonic() - start < 30


def test_module_mode_and_arguments(tmp_path):
    (tmp_path / "cgmod.py").write_text("import sys\nassert sys.argv[1:] == ['a', '--b']\n")
    cmd = [sys.executable, "-m", "cugather.distributed.run", "--nproc-per-node", "2", "-m",
           "cgmod", "a", "--b"]
    env = dict(__import__("os").environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr


def test_processes_meet_at_the_token_checked_store(tmp_path):
    """The real rendezvous across processes: store on rank 0, all-gathers, no GPU."""
    out = tmp_path / "seen"
    out.mkdir()
    r = _launch(tmp_path, f"""
        import os
        from cugather.distributed.rendezvous import connect_store, read_env
        env = read_env()
        group = connect_store(env, timeout=20)
        seen = [group.allgather(f"{{env.rank}}:{{i}}".encode()) for i in range(3)]
        with open(os.path.join({str(out)!r}, str(env.rank)), "w") as f:
            f.write(repr(seen))
        group.allgather(b"")  # rank 0 keeps serving until everyone has read
        group.close()
        """, "--nproc-per-node", "4")
    assert r.returncode == 0, r.stderr
    want = repr([[f"{q}:{i}".encode() for q in range(4)] for i in range(3)])
    assert all((out / str(q)).read_text() == want for q in range(4))


def test_a_rank_with_another_token_is_refused_and_the_launcher_stops_the_job(tmp_path):
    """A rank holding a different token is refused (the store carries on); its exit
    stops the others, none hangs."""
    r = _launch(tmp_path, """
        import os
        from cugather.distributed.rendezvous import connect_store, read_env
        if os.environ["RANK"] == "1":
            os.environ["CUGATHER_JOB_TOKEN"] = "not-the-job-token-at-all"
        env = read_env()
        group = connect_store(env, timeout=20)
        group.allgather(b"hello")
        """, "--nproc-per-node", "2", "--grace", "1", timeout=60)
    assert r.returncode != 0
    assert "job token" in r.stderr

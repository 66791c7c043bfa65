"""GPU tier of cugather.distributed: real processes, real NCCL, real peer reads.

Each test starts its processes through the launcher (or torchrun) with a
watchdog: the launcher's --timeout stops the ranks, and the subprocess
timeout fails the test, so a hang is a failure, never a stuck run.  The
ranks' checks live in tests/gpu/distributed_worker.py; each writes a JSON
report that the test reads and asserts on.  Needs >= 2 GPUs.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cugather.env import gpu_count

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("distributed_worker.py")
GPUS = gpu_count()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS < 2, reason=f"needs >= 2 GPUs, this machine has {GPUS}"),
]


def _env(**extra):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _run(cmd, outdir: Path, job: str, ranks: int, limit: float, env=None):
    """Run ``cmd`` under a watchdog; return the ranks' report items."""
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env or _env(), capture_output=True, text=True,
                           timeout=limit + 60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{job}: still running {limit + 60:g} s after start (a hang):\n"
                    f"{(e.stderr or b'')[-4000:]}", pytrace=False)
    reports = []
    for q in range(ranks):
        path = outdir / f"{job}-rank{q}.json"
        if not path.exists():
            pytest.fail(f"{job}: rank {q} wrote no report (exit {r.returncode}):\n"
                        f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}", pytrace=False)
        reports.append(json.loads(path.read_text()))
    failed = [f"rank {q}: {item['name']}: {item['detail']}" for q, items in enumerate(reports)
              for item in items if not item["ok"]]
    assert not failed, "\n".join(failed[:10])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-6000:]}"
    return reports


def _launch(job, tmp_path, nproc=2, limit=240, transports=None, env=None):
    cmd = [sys.executable, "-m", "cugather.distributed.run", "--nproc-per-node", str(nproc),
           "--timeout", str(limit), str(WORKER), job, str(tmp_path)]
    if transports:
        cmd += ["--transports", transports]
    return _run(cmd, tmp_path, job, nproc, limit, env)


def test_every_dtype_row_size_shard_layout_and_mode_both_transports(tmp_path):
    reports = _launch("matrix", tmp_path)
    names = {item["name"] for item in reports[0]}
    assert any("nccl" in n for n in names) and any("p2p" in n for n in names)
    auto = [i["detail"] for i in reports[0] if i["name"].startswith("auto picks")]
    print("table transport:", auto)


def test_nccl_network_path_without_p2p_or_shared_memory(tmp_path):
    """NCCL's socket transport, the one used between hosts (over loopback unless
    NCCL_SOCKET_IFNAME says otherwise)."""
    _launch("matrix", tmp_path, transports="nccl",
            env=_env(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1",
                     NCCL_SOCKET_IFNAME=os.environ.get("NCCL_SOCKET_IFNAME", "lo")))


def test_raise_on_one_rank_and_on_every_rank(tmp_path):
    reports = _launch("raise", tmp_path, limit=120)
    print([i["detail"] for i in reports[0]])


def test_peer_reads_in_a_cuda_graph(tmp_path):
    _launch("graph", tmp_path, limit=120)


def test_a_missing_rank_times_out_instead_of_hanging(tmp_path):
    reports = _launch("timeout", tmp_path, limit=120)
    assert "TimeoutError" in reports[0][0]["detail"]


def test_more_processes_than_gpus_peer_reads_only(tmp_path):
    """More ranks than GPUs: 4 ranks on 2 GPUs (two per GPU, CUDA IPC within a GPU too)."""
    _launch("shared", tmp_path, nproc=2 * GPUS)


def test_single_process_driving_every_gpu(tmp_path):
    cmd = [sys.executable, str(WORKER), "local", str(tmp_path)]
    _run(cmd, tmp_path, "local", 1, 240)


@pytest.mark.skipif(shutil.which("torchrun") is None and
                    __import__("importlib").util.find_spec("torch") is None,
                    reason="torch is not installed: torchrun is not available")
def test_the_same_script_under_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(WORKER), "raise", str(tmp_path)]
    _run(cmd, tmp_path, "raise", 2, 180)

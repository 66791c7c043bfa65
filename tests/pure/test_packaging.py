"""Packaging: the sdist carries its tests, the wheel its kernels, the metadata is complete.

The sdist and the wheel are built once each (offline: ``python -m build
--no-isolation``, so the ``build`` module and setuptools >= 77 must be
installed; the ``test`` extra brings both), the wheel from the unpacked sdist,
as pip builds it from PyPI.
"""

import email
import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs Python 3.11 or tomli")

import lowest_constraints  # tests/tools


def _build_problem():
    if importlib.util.find_spec("build") is None:
        return "the 'build' module is not installed (pip install build, or the test extra)"
    try:
        from importlib.metadata import version

        major = int(version("setuptools").split(".")[0])
    except Exception as e:
        return f"setuptools is not installed ({e})"
    if major < 77:
        return f"setuptools {version('setuptools')} is older than 77 (pyproject's build requirement)"
    return None


@pytest.fixture(scope="module")
def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _build(args, out):
    problem = _build_problem()
    if problem:
        pytest.skip(f"cannot build the sdist and wheel offline: {problem}")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """The sdist of this source tree."""
    out = tmp_path_factory.mktemp("sdist")
    _build(["--sdist", str(ROOT)], out)
    found, = out.glob("cugather-*.tar.gz")
    return found


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    """The wheel built from the unpacked sdist, as pip builds one from PyPI."""
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        try:
            tar.extractall(unpacked, filter="data")
        except TypeError:  # a Python without extraction filters
            tar.extractall(unpacked)
    out = tmp_path_factory.mktemp("wheel")
    source, = unpacked.iterdir()
    _build(["--wheel", str(source)], out)
    found, = out.glob("cugather-*.whl")
    return found


def _source_files(folder):
    """Files under ROOT/folder, as paths relative to ROOT, without caches."""
    found = set()
    for path in (ROOT / folder).rglob("*"):
        rel = path.relative_to(ROOT)
        if path.is_file() and not ({"__pycache__", ".hypothesis", ".pytest_cache"} & set(rel.parts)) \
                and path.suffix not in (".pyc", ".so"):
            found.add(rel.as_posix())
    return found


def test_sdist_ships_the_whole_test_suite_and_the_documents(sdist):
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = _source_files("tests") | _source_files("kernels") | _source_files("templates") | {
        "LICENSE", "README.md", "CHANGELOG.md", "BENCHMARKS.md", "benchmarks/fixed.json",
        "benchmarks/fixed.png", "pyproject.toml", "MANIFEST.in", "cugather/py.typed"}
    assert {"tests/conftest.py", "tests/hostsim/cuda_shim.h",
            "tests/hostsim/shim_selftest.cu", "tests/tools/gpu_suite.sh"} <= wanted
    missing = sorted(wanted - names)
    assert not missing, f"the sdist lacks {missing}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_carries_the_kernels_templates_and_type_marker(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    headers = {f"cugather/kernels/{p.name}" for p in (ROOT / "kernels").glob("*.cuh")}
    templates = {f"cugather/templates/{p.name}" for p in (ROOT / "templates").glob("*.j2")}
    assert headers and templates
    tables = {f"cugather/plan/tables/{p.name}" for p in (ROOT / "cugather/plan/tables").glob("*.json")}
    assert "cugather/plan/tables/sm_90.json" in tables
    assert headers | templates | tables | {"cugather/py.typed", "cugather/__main__.py"} <= names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "cugather").rglob("*.py")}
    assert modules <= names, f"the wheel lacks {sorted(modules - names)}"
    assert not [n for n in names if n.startswith("tests/")]


def test_wheel_metadata_is_ready_to_publish(wheel):
    with zipfile.ZipFile(wheel) as whl:
        meta_name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(whl.read(meta_name))
        licenses = [n for n in whl.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        entry_points = whl.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
        license_text = whl.read(licenses[0]).decode() if licenses else ""
    assert meta["License-Expression"] == "MIT" and meta.get_all("License-File") == ["LICENSE"]
    assert "Copyright (c) 2026 The cugather authors" in license_text
    assert meta["Requires-Python"] == ">=3.10"
    assert set(meta.get_all("Provides-Extra")) >= {"cuda12", "cuda13", "test", "bench"}
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Source", "Issues", "Changelog"}
    assert all(u.startswith("https://github.com/cugather/cugather") for u in urls.values())
    assert "Typing :: Typed" in meta.get_all("Classifier") and meta["Keywords"]
    assert "cugather = cugather.cli.main:main" in entry_points


def test_package_list_names_every_package_folder(pyproject):
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    mapped = pyproject["tool"]["setuptools"]["package-dir"]
    folders = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "cugather").rglob("__init__.py")}
    folders |= set(mapped)
    assert all((ROOT / d / "__init__.py").exists() for d in mapped.values())
    assert listed == folders, (f"[tool.setuptools] packages in pyproject.toml must name every "
                               f"package: add {sorted(folders - listed)}, drop "
                               f"{sorted(listed - folders)}")


def test_extras_bring_cupy_nvrtc_and_nccl_per_cuda_major_and_test_brings_no_cupy(pyproject):
    extras = pyproject["project"]["optional-dependencies"]
    names = {e: {lowest_constraints.lower_bound(r)[0] for r in reqs} for e, reqs in extras.items()}
    assert names["cuda12"] == {"cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "nvidia-nccl-cu12"}
    assert names["cuda13"] == {"cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-nccl-cu13"}
    assert not [n for n in names["test"] if n.startswith(("cupy", "nvidia-"))]


def test_every_requirement_has_an_exact_lower_bound_to_pin(pyproject):
    extras = list(pyproject["project"]["optional-dependencies"])
    pins = lowest_constraints.lower_bounds(pyproject, extras)
    assert {"numpy", "jinja2", "cupy-cuda12x", "cupy-cuda13x", "pytest"} <= set(pins)
    for name, version in pins.items():
        assert version.count(".") == 2 or name in ("tqdm", "matplotlib"), \
            f"{name}>={version}: give the full release, so that =={version} names it"
    with pytest.raises(ValueError, match="must have exactly one lower bound"):
        lowest_constraints.lower_bound("numpy<3")


def test_cuda_extra_brings_an_nccl_cupy_can_load():
    from cugather.env import probe

    env = probe()
    if env.cupy_problem is not None:
        pytest.skip(f"needs CuPy: {env.cupy_problem}")
    from importlib.metadata import distributions

    wheels = [d.metadata["Name"] for d in distributions()
              if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl")]
    if not wheels:
        pytest.skip("no NVIDIA NCCL wheel is installed (the cuda12 and cuda13 extras bring one)")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cupy.cuda import nccl
    assert nccl.available, f"CuPy {env.cupy_version} cannot load NCCL from {wheels}"
    assert nccl.get_version() >= 21801


def test_readme_test_command_is_what_ci_runs():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("no .ci/run here (an unpacked sdist has none)")
    readme = (ROOT / "README.md").read_text()
    command = "python -m pytest -q -ra"
    assert command in readme and command in ci.read_text()
    assert "pip install -q -e '.[cuda12,test]'" in readme and ".[cuda12,test]" in ci.read_text()

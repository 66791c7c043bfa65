"""What this machine offers cugather: CuPy, NVRTC, an NVIDIA driver, GPUs.

:func:`probe` returns an :class:`Environment`: what was found and, for
whatever is missing, one paragraph that says what it is and the pip command
that installs cugather's packages for the CUDA major this machine points to.
Compiling kernels needs CuPy and NVRTC (no GPU); running them needs a driver
and a GPU as well.  Nothing in this module raises.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import os
import re
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Optional, Tuple

__all__ = ["Environment", "probe", "no_gpu_reason", "nvrtc_problem", "gpu_count"]

Version = Tuple[int, int]

#: CuPy packages cugather supports, by the CUDA major they are built for.
CUPY_PACKAGES = {"cupy-cuda12x": 12, "cupy-cuda13x": 13}
#: NVIDIA's NVRTC wheels (``nvidia-cuda-nvrtc`` is CUDA 13 and later).
NVRTC_PACKAGES = ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc")
#: Oldest NVIDIA Linux driver for each CUDA major.
MIN_DRIVER = {12: "525", 13: "580"}
#: First CuPy that finds NVIDIA's pip wheels of NVRTC.
MIN_CUPY = (14, 0)

_NO_DEVICE = 100  # cudaErrorNoDevice


@dataclass(frozen=True)
class Environment:
    """What :func:`probe` found.  The ``*_problem`` properties are None or a paragraph.

    Attributes
    ----------
    packages : tuple of (str, str)
        Installed CuPy and NVRTC distributions, as ``(name, version)``.
    cupy_version : str or None
        Version of the CuPy that imports; None when ``import cupy`` fails.
    cupy_error : str or None
        Why ``import cupy`` failed (None when it worked).
    cuda_runtime : (int, int) or None
        CUDA version the imported CuPy was built for.
    driver : (int, int) or None
        CUDA version the NVIDIA driver supports; None when there is no driver.
    nvrtc : (int, int) or None
        Version of the NVRTC library CuPy loads; None when it cannot.
    nvrtc_error : str or None
        Why NVRTC cannot be loaded.
    gpus : int
        CUDA devices the driver reports (0 on any failure).
    gpu_error : str or None
        Error of the device query, when it failed.
    gpu_error_status : int or None
        Its CUDA error code (100: no device, 35: driver too old).
    """

    packages: Tuple[Tuple[str, str], ...] = ()
    cupy_version: Optional[str] = None
    cupy_error: Optional[str] = None
    cuda_runtime: Optional[Version] = None
    driver: Optional[Version] = None
    nvrtc: Optional[Version] = None
    nvrtc_error: Optional[str] = None
    gpus: int = 0
    gpu_error: Optional[str] = None
    gpu_error_status: Optional[int] = None

    # ------------------------------------------------------------ what to install
    @property
    def cupy_packages(self) -> Tuple[Tuple[str, str], ...]:
        """Installed CuPy distributions (``cupy-cuda12x``, ``cupy-cuda13x``, ...)."""
        return tuple((n, v) for n, v in self.packages if n == "cupy" or n.startswith("cupy-"))

    @property
    def cuda_major(self) -> int:
        """CUDA major to install cugather's packages for (see :attr:`install_command`)."""
        return self._choice()[0]

    def _choice(self) -> Tuple[int, str]:
        """(CUDA major, why): the installed CuPy's if the driver can run it, else the
        driver's, else that of the installed NVRTC wheels, else 12."""
        cupies = [(n, CUPY_PACKAGES[n]) for n, _ in self.cupy_packages if n in CUPY_PACKAGES]
        driver = self.driver
        if len(cupies) == 1 and (driver is None or driver[0] >= cupies[0][1]):
            return cupies[0][1], f"{cupies[0][0]} is installed"
        if driver is not None:
            return (13 if driver[0] >= 13 else 12,
                    f"the NVIDIA driver here supports CUDA {_v(driver)}")
        for name, version in self.packages:
            if name in NVRTC_PACKAGES and _version_tuple(version)[0] in (12, 13):
                return _version_tuple(version)[0], f"{name} {version} is installed"
        return 12, ("no NVIDIA driver was found; for a CUDA 13 driver (580 or newer) use "
                    "'cugather[cuda13]'")

    @property
    def install_command(self) -> str:
        """The pip command that gives cugather CuPy and NVRTC for :attr:`cuda_major`.

        CuPy packages for another CUDA major are uninstalled first.
        """
        major = self.cuda_major
        other = [n for n, _ in self.cupy_packages
                 if n.startswith("cupy-cuda") and CUPY_PACKAGES.get(n) != major]
        install = f"pip install 'cugather[cuda{major}]'"
        return f"pip uninstall -y {' '.join(other)} && {install}" if other else install

    # ------------------------------------------------------------ problems
    @property
    def cupy_problem(self) -> Optional[str]:
        """Why CuPy is unusable (absent, broken, two of them), or None."""
        cupies = self.cupy_packages
        if len(cupies) > 1:
            names = ", ".join(f"{n} {v}" for n, v in cupies)
            return (f"Several CuPy packages are installed ({names}); they overwrite each "
                    f"other's files, so CuPy cannot be trusted. Keep one: pip uninstall -y "
                    f"{' '.join(n for n, _ in cupies)} && "
                    f"pip install 'cugather[cuda{self.cuda_major}]'")
        if self.cupy_error is None:
            return None
        if not cupies:
            major, why = self._choice()
            return (f"CuPy is not installed, so cugather can plan gathers but neither compile "
                    f"nor run them. Install it with NVRTC for CUDA {major} ({why}): "
                    f"{self.install_command}")
        name, version = cupies[0]
        return (f"{name} {version} is installed but 'import cupy' fails ({self.cupy_error}), "
                f"so cugather can neither compile nor run kernels. Reinstall it: "
                f"pip install --force-reinstall '{name}=={version}', or {self.install_command}")

    @property
    def nvrtc_problem(self) -> Optional[str]:
        """Why kernels cannot be compiled here (CuPy or NVRTC missing), or None."""
        if self.cupy_problem is not None:
            return self.cupy_problem
        if self.nvrtc is not None:
            return None
        who = f"CuPy {self.cupy_version}"
        if self.cupy_packages:
            who += f" ({self.cupy_packages[0][0]})"
        text = (f"{who} cannot load NVRTC, the CUDA compiler cugather builds its kernels "
                f"with at run time ({self.nvrtc_error}).")
        if _version_tuple(self.cupy_version) < MIN_CUPY:
            text += (f" CuPy before {_v(MIN_CUPY)} does not look for NVIDIA's NVRTC wheels; "
                     f"upgrade CuPy and install the wheel: {self.install_command}")
        else:
            text += (f" NVIDIA's pip wheel for CUDA {self.cuda_major} provides it: "
                     f"{self.install_command}")
        return text

    @property
    def gpu_problem(self) -> Optional[str]:
        """Why no kernel can run here (no CuPy, driver, or GPU), or None."""
        if self.cupy_problem is not None:
            return self.cupy_problem
        if self.gpus > 0:
            return None
        runtime = self.cuda_runtime
        if self.driver is None:
            return (f"No NVIDIA driver was found (libcuda cannot be loaded), so kernels cannot "
                    f"run on this machine; compiling and inspecting them needs no GPU, only "
                    f"NVRTC. On a machine with an NVIDIA GPU, install its driver; cugather's "
                    f"packages for CUDA {self.cuda_major}: {self.install_command}")
        if self.driver[0] < 12:
            return (f"The NVIDIA driver supports CUDA {_v(self.driver)}; cugather needs CUDA 12 "
                    f"or newer (driver {MIN_DRIVER[12]} or newer), so no kernel can run. "
                    f"Update the driver, then: {self.install_command}")
        if runtime is not None and self.driver[0] < runtime[0]:
            return (f"The NVIDIA driver supports CUDA {_v(self.driver)}, older than the CUDA "
                    f"{_v(runtime)} that CuPy {self.cupy_version} is built for, so no kernel "
                    f"can run. Update the driver (CUDA {runtime[0]} needs "
                    f"{MIN_DRIVER.get(runtime[0], 'a newer one')} or newer), or keep it and use "
                    f"CuPy for CUDA {self.cuda_major}: {self.install_command}")
        if self.gpus == 0 and (self.gpu_error is None or self.gpu_error_status == _NO_DEVICE):
            hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
            return (f"The NVIDIA driver (CUDA {_v(self.driver)}) is loaded but reports no GPU"
                    + (f" (CUDA_VISIBLE_DEVICES={hidden!r} selects which ones are seen)"
                       if hidden is not None else "")
                    + f"; check the device with nvidia-smi. cugather's packages for this "
                      f"driver: {self.install_command}")
        return (f"CUDA cannot use a GPU here ({self.gpu_error}), with a driver for CUDA "
                f"{_v(self.driver)}. cugather's packages for this driver: "
                f"{self.install_command}")


# ---------------------------------------------------------------- probes
def _distributions() -> Tuple[Tuple[str, str], ...]:
    found = []
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or name.startswith("cupy-cuda") or name in NVRTC_PACKAGES:
            found.append((name, dist.version))
    return tuple(sorted(set(found)))


def _import_cupy() -> Tuple[Optional[ModuleType], Optional[str]]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # CuPy warns about duplicate installs itself
            return importlib.import_module("cupy"), None
    except Exception as e:  # ImportError, or a broken installation raising anything
        return None, _err(e)


def _driver_version(cupy: Optional[ModuleType]) -> Optional[Version]:
    """CUDA version the driver supports, from CuPy or straight from libcuda."""
    if cupy is not None:
        try:
            v = int(cupy.cuda.runtime.driverGetVersion())
            return (v // 1000, v % 1000 // 10) if v > 0 else None
        except Exception:
            pass
    for name in (("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")):
        try:
            lib = ctypes.CDLL(name)
            out = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(out)) == 0 and out.value > 0:
                return out.value // 1000, out.value % 1000 // 10
        except (OSError, AttributeError):
            continue
    return None


def _device_count(cupy: ModuleType) -> int:
    return int(cupy.cuda.runtime.getDeviceCount())


def _nvrtc_version() -> Version:
    from cupy_backends.cuda.libs import nvrtc

    major, minor = nvrtc.getVersion()
    return int(major), int(minor)


def probe() -> Environment:
    """Look at this machine: CuPy, NVRTC, the NVIDIA driver, GPUs.  Never raises.

    Returns
    -------
    Environment
        What was found; its ``cupy_problem``, ``nvrtc_problem`` and
        ``gpu_problem`` say what is missing and how to install it.
    """
    cupy, cupy_error = _import_cupy()
    if cupy is None:
        return Environment(packages=_distributions_or_none(), cupy_error=cupy_error,
                           driver=_driver_or_none(None), nvrtc_error=cupy_error)
    runtime = nvrtc = None
    nvrtc_error = gpu_error = None
    gpus, status = 0, None
    try:
        v = int(cupy.cuda.runtime.runtimeGetVersion())
        runtime = (v // 1000, v % 1000 // 10)
    except Exception:
        pass
    try:
        nvrtc = _nvrtc_version()
    except Exception as e:
        nvrtc_error = _err(e)
    try:
        gpus = _device_count(cupy)
    except Exception as e:
        gpu_error, status = _err(e), getattr(e, "status", None)
    return Environment(packages=_distributions_or_none(),
                       cupy_version=str(getattr(cupy, "__version__", "?")),
                       cuda_runtime=runtime, driver=_driver_or_none(cupy), nvrtc=nvrtc,
                       nvrtc_error=nvrtc_error, gpus=gpus, gpu_error=gpu_error,
                       gpu_error_status=status if isinstance(status, int) else None)


def _distributions_or_none() -> Tuple[Tuple[str, str], ...]:
    try:
        return _distributions()
    except Exception:  # unreadable metadata: decide from imports alone
        return ()


def _driver_or_none(cupy: Optional[ModuleType]) -> Optional[Version]:
    try:
        return _driver_version(cupy)
    except Exception:
        return None


def no_gpu_reason() -> Optional[str]:
    """None when a CUDA GPU is usable, else a paragraph saying what is missing."""
    return probe().gpu_problem


def nvrtc_problem() -> Optional[str]:
    """None when kernels can be compiled (CuPy and NVRTC load), else a paragraph why not."""
    return probe().nvrtc_problem


def gpu_count() -> int:
    """Number of usable CUDA GPUs (0 when none is usable)."""
    env = probe()
    return env.gpus if env.gpu_problem is None else 0


# ---------------------------------------------------------------- helpers
def _err(e: BaseException) -> str:
    text = " ".join(str(e).split())  # one line: pathfinder's messages end in newlines
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _v(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def _version_tuple(version: Optional[str]) -> Version:
    """(major, minor) of a version string; (0, 0) where there is none."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)

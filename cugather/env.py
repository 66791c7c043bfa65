"""What this machine offers: CuPy, NVRTC, GPUs.  Never raises."""

from __future__ import annotations

__all__ = ["gpu_count", "no_gpu_reason", "nvrtc_available"]


def no_gpu_reason():
    """None when a CUDA GPU is usable, else a sentence saying why not."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'cugather[cuda12]')"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, driver too old
        return f"no usable CUDA GPU ({type(e).__name__}: {str(e).strip()})"
    return None if n > 0 else "no CUDA GPU found"


def gpu_count() -> int:
    if no_gpu_reason() is not None:
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def nvrtc_available():
    """None when NVRTC can be loaded, else the reason it cannot."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:
        return f"NVRTC is not available ({type(e).__name__}: {e})"
    return None

"""The compiled same-buffers replay (fast_submit.c): building it and loading it.

`python -c "from amdgpu.vulkan.fast_submit import main; main()"` (scripts/setup.sh runs it)
builds build/vulkan/_fast_submit<EXT_SUFFIX> with gcc when it is missing or was built from
another fast_submit.c (amdgpu.c_extension). `MODULE` is the loaded extension, or None
(`why_not` says why): then `VulkanDevice.submit` is the Python method and a replay of the
last submission's buffers takes CommandBuffer's Python short way instead; the two are never
used side by side. `AMDGPU_PYTHON_VULKAN_SUBMIT=1` picks the Python steps even when the
module is built (tests run both). Nothing is compiled on import.
"""

from __future__ import annotations

from pathlib import Path

from amdgpu import c_extension

SOURCE = Path(__file__).with_suffix(".c")
ENV_VAR = "AMDGPU_PYTHON_VULKAN_SUBMIT"  # "1": the Python steps even when the build exists


def library_path() -> Path:
    return c_extension.library_path("vulkan", "_fast_submit")


def build(out: Path | None = None) -> Path:
    """Compile fast_submit.c into `out` (default: library_path()); RuntimeError with gcc's
    first line of complaint when it cannot."""
    return c_extension.build(SOURCE, out or library_path(), "the Vulkan submit")


MODULE, why_not = c_extension.load("amdgpu.vulkan._fast_submit", library_path(), SOURCE,
                                   ENV_VAR)


def status() -> str:
    """One line: which replay submit the Vulkan backend uses."""
    return "compiled (fast_submit.c)" if MODULE is not None else f"Python ({why_not})"


def main() -> None:
    c_extension.setup(SOURCE, library_path(), "the Vulkan submit",
                      "the Vulkan backend uses its Python steps")


if __name__ == "__main__":
    main()

"""Session-wide test setup."""

import os

import torch


def _patch_the_language_once_per_launch():
    """Triton's interpreter patches triton.language for a launch (a walk with inspect.getmembers over its
    modules, undone when the launch ends), and again at every call of a @triton.jit helper inside the
    kernel, where it changes nothing: a helper whose module holds the language modules the launch patched
    runs with them patched. Those repeats took a third of an interpreted test's time. Here a helper call
    skips them when every language module it would patch is patched by the launch in progress; any other
    call, and every launch, goes to Triton's own patching. An interpreter without these internals is left
    as it is (the tests then only run slower)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter

        patch, scope = interpreter._patch_lang, interpreter._LangPatchScope
        restore = scope.restore
    except (ImportError, AttributeError):
        return
    patched = set()  # ids of the language modules the launch in progress has patched

    def patch_once(fn):
        # the modules Triton's _patch_lang patches for fn: those of tl and tl.core that fn's globals hold
        langs = {id(m) for m in fn.__globals__.values() if m is tl or m is tl.core}
        if langs and langs <= patched:
            return scope()
        changes = patch(fn)
        patched.update(langs)
        return changes

    def restore_and_forget(self):  # only a launch restores its patches, when it ends
        restore(self)
        patched.clear()

    interpreter._patch_lang = patch_once
    scope.restore = restore_and_forget


# Triton decides when a kernel is decorated whether it runs through its interpreter, so the switch
# must be set before any test imports pasa_npu.backends.triton: without a GPU (CI), every Triton
# kernel of the session is interpreted (tests/backends/test_triton_interpret.py runs them on tiny shapes).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] == "1":
        _patch_the_language_once_per_launch()

# torch.compile's caches (Inductor's FX graph and kernel caches, /tmp/torchinductor_<user> by default) are keyed
# without the schema of our custom ops, so two checkouts of the package on one machine whose op schemas differ
# would replay each other's compiled graphs ("expected at most N arguments"). Each checkout keeps its own, in its
# ignored build folder.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "inductor"))

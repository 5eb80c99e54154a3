"""Every kernel the triton tests generated compiles for a real NVIDIA target (sm_90), without a GPU.

The interpreter accepts some programs the real compiler rejects (types, shapes of constexpr blocks),
so each generated kernel goes through `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`
down to PTX and cubin. This runs in a subprocess with TRITON_INTERPRET=0: the kernels must be real
JITFunctions, and the interpreter patches triton.language in this process. conftest.py runs this test
last; run alone, it first generates the kernels of every case in triton_cases.py (without running them).
"""
import json
import os
import subprocess
import sys
import textwrap

from framejit.backends.triton import runtime
from framejit.backends.triton import triton as triton_backend
from tests.backends.triton_cases import CASES
from tests.backends.triton_util import trace

COMPILE_SCRIPT = textwrap.dedent('''
    import importlib.util, json, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failures = []
    for k, (path, name, signature, constexprs) in enumerate(json.load(open(sys.argv[1]))):
        spec = importlib.util.spec_from_file_location(f"sm90_check_{k}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, name)
        if isinstance(fn, triton.runtime.Autotuner):  # autotuned kernels wrap the JITFunction
            fn = fn.fn
        try:
            compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
            assert "ptx" in compiled.asm and "cubin" in compiled.asm
        except Exception as error:
            failures.append(f"{path}:{name}: {type(error).__name__}: {str(error)[:500]}")
    print(json.dumps(failures))
''')


def _generate_case_kernels():
    for case in CASES:
        example = case.make_inputs(0)
        triton_backend(trace(case.fn, len(example)), list(example), case.options)


def test_every_generated_kernel_compiles_for_sm90(tmp_path):
    if not runtime.KERNELS:
        _generate_case_kernels()
    unique = {}
    for (path, name), (signature, constexprs, source) in sorted(runtime.KERNELS.items()):
        key = (source.replace(name, "K"), json.dumps(signature, sort_keys=True), json.dumps(constexprs, sort_keys=True))
        unique.setdefault(key, (path, name, signature, constexprs))
    assert len(unique) >= 20, "expected the test suite to have generated many distinct kernels"
    listing = tmp_path / "kernels.json"
    listing.write_text(json.dumps(list(unique.values())))
    script = tmp_path / "compile_sm90.py"
    script.write_text(COMPILE_SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="0")
    result = subprocess.run([sys.executable, str(script), str(listing)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert failures == [], "\n".join(failures)
    print(f"compiled {len(unique)} distinct kernels for sm_90")

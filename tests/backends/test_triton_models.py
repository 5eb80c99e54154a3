"""The model zoo end to end through the triton backend (inference, under torch.no_grad()).

Each model becomes an FX graph returning flat output tensors: torch.fx.symbolic_trace when the model
allows it (an output dataclass constructor at the end of the graph is replaced by the tuple of its
arguments), else make_fx of the model followed by zoo.output_tensors. The graph is compiled on the
inputs of seed 0 and compared with the same graph run eagerly on seeds 0 and 1, atol=rtol=1e-4
(fused float32 kernels reorder sums).
"""
import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from framejit.backends.triton import triton as triton_backend
from framejit.backends.triton.runtime import CompiledGraph
from tests.models import zoo


def flat_graph(case, example) -> torch.fx.GraphModule:
    if not case.fx_traceable:
        return make_fx(lambda *args: zoo.output_tensors(case.model(*args)))(*example)
    gm = torch.fx.symbolic_trace(case.model)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    value = output.args[0]
    if isinstance(value, torch.fx.Node) and value.op == "call_function" and isinstance(value.target, type):
        leaves = [a for a in pytree.tree_leaves((value.args, value.kwargs)) if isinstance(a, torch.fx.Node)]
        output.args = (tuple(leaves),)
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return gm


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_matches_eager(name):
    case = zoo.get(name, size="small")
    with torch.no_grad():
        example = case.make_inputs(0)
        gm = flat_graph(case, example)
        compiled = triton_backend(gm, list(example))
        assert isinstance(compiled, CompiledGraph), compiled.reason
        assert compiled.kernel_count >= 1
        for seed in (0, 1):
            inputs = case.make_inputs(seed)
            torch.testing.assert_close(compiled(*inputs), gm(*inputs), atol=1e-4, rtol=1e-4)

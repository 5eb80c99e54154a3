"""An exception raised inside a compiled graph reaches the caller as eager's does, and nothing else is printed
(NOTE [Graph modules called through forward] in backends/onnxrt/lowering.py): torch.fx's GraphModule.__call__
printed the generated code's traceback to stderr, once per backend layer that called it."""
import pytest
import torch

import framejit


def scale(x, n):
    return x * (1 / n) + 1


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_division_by_a_graph_input_raises_like_eager_and_prints_nothing(backend, capfd):
    framejit.reset()
    compiled = framejit.compile(scale, backend=backend)
    before = framejit.stats()  # process-wide counters: compare with what this test added
    for n in (2, 3, 4):  # the int changes: it becomes an input of the graph
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x, n), scale(x, n))
    after = framejit.stats()
    # the raise below comes from a compiled graph, not from a frame that ran eagerly
    assert after["graphs"] - before["graphs"] >= 1 and after["eager_frames"] == before["eager_frames"]
    capfd.readouterr()
    outcomes = []
    for fn in (scale, compiled):
        with pytest.raises(ZeroDivisionError) as info:
            fn(torch.randn(5), 0)
        outcomes.append((str(info.value), capfd.readouterr()))
    (eager_msg, eager_out), (compiled_msg, compiled_out) = outcomes
    assert compiled_msg == eager_msg
    assert compiled_out.err == eager_out.err == ""
    assert compiled_out.out == eager_out.out
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x, 5), scale(x, 5))  # still compiled and correct afterwards


TABLE = torch.arange(4.0)


def pick_rows(index):
    return TABLE.view(2, 2)[index] * 2


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_an_index_out_of_range_in_a_compiled_graph_prints_nothing(backend, capfd):
    """ORT's kernel failure (GatherND, index 3 of 2 rows) is raised, rerun eagerly and caught by the
    user; ORT used to also write an error line of its own to stderr (NOTE [ORT logs nothing])."""
    framejit.reset()
    compiled = framejit.compile(pick_rows, backend=backend)
    for rows in ([0, 1], [1, 0]):
        torch.testing.assert_close(compiled(torch.tensor(rows)), pick_rows(torch.tensor(rows)))
    capfd.readouterr()
    outcomes = []
    for fn in (pick_rows, compiled):
        with pytest.raises(IndexError) as info:
            fn(torch.tensor([0, 3]))
        outcomes.append((str(info.value), capfd.readouterr()))
    (eager_msg, eager_out), (compiled_msg, compiled_out) = outcomes
    assert compiled_msg == eager_msg
    assert compiled_out.err == eager_out.err == ""
    torch.testing.assert_close(compiled(torch.tensor([1, 1])), pick_rows(torch.tensor([1, 1])))

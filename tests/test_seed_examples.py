"""Every ``expect(...)`` example of the seed documents in /work/shared/spec, at the version the
document shows it under, through the onnx-reduce backend.

The examples' code is executed as written, with ``expect`` recording the node, inputs and outputs.
Each ``reduced = <formula>`` is also evaluated on the data cast to float64 (the documents' own
formula in float64), which is the expected value; the documents' own outputs and the values
printed in their ``# print(reduced)`` comments are checked too. Where the documents disagree with
``onnx.defs`` the tests at the end pin the schema's answer (see docs/spec-differences.md).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from onnx_reduce import backend
from onnx_reduce.spec import VERSIONS

SPEC_DIR = Path("/work/shared/spec")
DOCUMENTS = {  # document -> operator; the .md and .zh.txt documents carry no examples
    "ReduceSum.txt": "ReduceSum",
    "ReduceL2.rst": "ReduceL2",
    "ReduceLogSumExp.rst": "ReduceLogSumExp",
    "ReduceLogSumExp.md": "ReduceLogSumExp",
    "ReduceLogSumExp.zh.txt": "ReduceLogSumExp",
}
pytestmark = pytest.mark.skipif(not SPEC_DIR.is_dir(), reason="seed documents not available")


@dataclass
class Example:
    document: str
    op: str
    version: int
    section: str
    name: str
    node: onnx.NodeProto
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    expected64: np.ndarray
    printed: list[float] | None

    @property
    def id(self) -> str:
        return f"{self.document}:{self.op}-{self.version}:{self.section}:{self.name}"


# --- reading the documents ----------------------------------------------------------------------


def _read(document: str) -> str:
    return (SPEC_DIR / document).read_text(encoding="utf-8")


def _version_sections(text: str, op: str) -> list[tuple[int, str]]:
    """(version, body) for each ``<op> - <version>`` heading of the document."""
    heading = re.compile(rf"^{op} - (\d+)#?\s*$", re.MULTILINE)
    marks = list(heading.finditer(text))
    return [
        (int(m.group(1)), text[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(text)])
        for i, m in enumerate(marks)
    ]


def document_versions(document: str) -> set[int]:
    """The versions a document describes (the .md lists them in one line)."""
    text = _read(document)
    listed = re.search(r"^All versions: ([\d, ]+)$", text, re.MULTILINE)
    if listed:
        return {int(v) for v in listed.group(1).split(",")}
    return {v for v, _ in _version_sections(text, DOCUMENTS[document])}


def _example_blocks(body: str) -> list[tuple[str, str]]:
    """(section title, code) for each example of one version section."""
    start = re.search(r"^(\*\*)?Examples(\*\*)?\s*$", body, re.MULTILINE)
    if not start:
        return []
    end = re.search(r"^(\*\*)?Differences(\*\*)?\s*$", body[start.end():], re.MULTILINE)
    region = body[start.end(): start.end() + end.start() if end else len(body)]
    title = re.compile(r"^(?:\*\*)?(_\w+?)(?:\*\*)?\s*$", re.MULTILINE)
    marks = list(title.finditer(region))
    blocks = []
    for i, m in enumerate(marks):
        code = region[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(region)]
        code = "\n".join(line for line in code.splitlines() if line.strip() != "::")
        blocks.append((m.group(1), textwrap.dedent(code).strip("\n")))
    return blocks


class _AlsoInFloat64(ast.NodeTransformer):
    """After each ``reduced = f(data, ...)``: ``reduced64 = f(data.astype(np.float64), ...)``."""

    def visit_Module(self, module: ast.Module) -> ast.Module:
        body = []
        for stmt in module.body:
            body.append(stmt)
            if isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == [
                "reduced"
            ]:
                formula = _Rename().visit(ast.parse(ast.unparse(stmt.value), mode="eval"))
                body += ast.parse(
                    f"data64 = data.astype(np.float64)\nreduced64 = {ast.unparse(formula)}"
                ).body
        module.body = body
        return module


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("data64", node.ctx) if node.id == "data" else node


def _printed_values(code: str) -> dict[str, list[float]]:
    """expect name -> the numbers of the ``# print(reduced)`` comment just before it."""
    found = {}
    for m in re.finditer(r"#\s*print\(reduced\)\s*\n((?:[ \t]*#.*\n)+)", code):
        numbers = re.findall(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", m.group(1))
        name = re.search(r"name\s*=\s*['\"](\w+)['\"]", code[m.end():])
        if name:
            found[name.group(1)] = [float(n) for n in numbers]
    return found


def _run_block(document: str, op: str, version: int, section: str, code: str) -> list[Example]:
    recorded: list[Example] = []
    printed = _printed_values(code)
    namespace: dict = {"np": np, "onnx": onnx}

    def expect(node, inputs, outputs, name):
        recorded.append(Example(
            document, op, version, section, name, node, [np.asarray(x) for x in inputs],
            [np.asarray(y) for y in outputs], np.asarray(namespace["reduced64"]),
            printed.get(name) if not any(e.name == name for e in recorded) else None,
        ))

    namespace["expect"] = expect
    tree = ast.fix_missing_locations(_AlsoInFloat64().visit(ast.parse(code)))
    state = np.random.get_state()  # noqa: NPY002 (the documents seed the legacy generator)
    try:
        exec(compile(tree, f"{document}:{section}", "exec"), namespace)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return recorded


def collect_examples() -> list[Example]:
    examples = []
    for document, op in DOCUMENTS.items():
        for version, body in _version_sections(_read(document), op):
            for section, code in _example_blocks(body):
                examples += _run_block(document, op, version, section, code)
    return examples


EXAMPLES = collect_examples() if SPEC_DIR.is_dir() else []

#: Tolerances against float64 values: float32 results are correctly rounded (<= 1 ulp) and the
#: documents' float32 outputs are a few ulp off; float64 results are within 2 ulp.
_RTOL = {np.dtype(np.float32): 2**-22, np.dtype(np.float64): 1e-14}


# --- the examples -------------------------------------------------------------------------------


def test_every_example_was_found():
    per_document = {d: sum(e.document == d for e in EXAMPLES) for d in DOCUMENTS}
    assert per_document == {"ReduceSum.txt": 10, "ReduceL2.rst": 8, "ReduceLogSumExp.rst": 8,
                            "ReduceLogSumExp.md": 0, "ReduceLogSumExp.zh.txt": 0}
    assert {(e.op, e.version) for e in EXAMPLES} == {
        ("ReduceSum", 13), ("ReduceL2", 13), ("ReduceLogSumExp", 13)}
    assert sum(e.printed is not None for e in EXAMPLES) == 13
    assert len({e.id for e in EXAMPLES}) == len(EXAMPLES)


def _model(example: Example) -> onnx.ModelProto:
    names = [n for n in example.node.input if n]
    inputs = [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(x.dtype), x.shape)
              for n, x in zip(names, example.inputs, strict=True)]
    (out,) = example.outputs
    outputs = [oh.make_tensor_value_info(example.node.output[0],
                                         oh.np_dtype_to_tensor_dtype(out.dtype), out.shape)]
    graph = oh.make_graph([example.node], example.name, inputs, outputs)
    model = oh.make_model_gen_version(graph, opset_imports=[oh.make_opsetid("", example.version)])
    onnx.checker.check_model(model, full_check=True)  # the node is valid at the shown version
    return model


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example(example: Example):
    (y,) = backend.prepare(_model(example)).run(example.inputs)
    (documented,) = example.outputs
    assert y.dtype == documented.dtype
    assert y.shape == documented.shape == example.expected64.shape
    rtol = _RTOL[y.dtype]
    np.testing.assert_allclose(y, example.expected64, rtol=rtol, atol=0)
    np.testing.assert_allclose(y, documented, rtol=2 * rtol, atol=0)
    if example.printed is not None:
        # printed with 8 decimals (the LSE document's values come from float32 arithmetic)
        np.testing.assert_allclose(y.ravel(), example.printed, rtol=1e-7, atol=5e-9)


# --- where the documents differ from onnx.defs: the schema's answer is what runs ----------------


def _schema_versions(op: str) -> set[int]:
    versions, v = set(), onnx.defs.onnx_opset_version()
    while v >= 1:
        try:
            schema = onnx.defs.get_schema(op, v)
        except onnx.defs.SchemaError:
            break
        versions.add(schema.since_version)
        v = schema.since_version - 1
    return versions


def test_documents_omit_newer_versions_the_schema_has():
    missing = {d: _schema_versions(op) - document_versions(d) for d, op in DOCUMENTS.items()}
    assert missing == {"ReduceSum.txt": set(), "ReduceL2.rst": {18},
                       "ReduceLogSumExp.rst": {18, 28}, "ReduceLogSumExp.md": {28},
                       "ReduceLogSumExp.zh.txt": {28}}
    for op in DOCUMENTS.values():
        assert set(VERSIONS[op]) == _schema_versions(op)  # we implement the schema's versions


def test_zh_function_body_omits_noop_with_empty_axes():
    text = _read("ReduceLogSumExp.zh.txt")
    line = next(ln for ln in text.splitlines() if "ReduceSum <" in ln)
    assert "noop_with_empty_axes" not in line
    body = onnx.defs.get_schema("ReduceLogSumExp", 18).function_body
    (reduce_sum,) = [n for n in body.node if n.op_type == "ReduceSum"]
    assert {a.ref_attr_name for a in reduce_sum.attribute} == {"keepdims", "noop_with_empty_axes"}
    # the schema's answer: noop with empty axes is elementwise log(exp(x)) = x, not a reduction
    node = oh.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], noop_with_empty_axes=1)
    x = np.array([[0.5, -2.0], [3.0, 800.0]])
    (y,) = backend.run_node(node, [x, np.array([], dtype=np.int64)], opset_version=18)
    np.testing.assert_array_equal(y, x)


def test_rank0_and_empty_set_rules_the_documents_omit():
    """ReduceSum.txt, ReduceL2.rst and ReduceLogSumExp.rst leave out, at versions 1 and 13,
    the schema's "Input tensors of rank zero are valid. Reduction over an empty set of values
    yields 0 (LSE: minus infinity)"."""
    sentence = "Input tensors of rank zero are"
    for document, op in [("ReduceSum.txt", "ReduceSum"), ("ReduceL2.rst", "ReduceL2"),
                         ("ReduceLogSumExp.rst", "ReduceLogSumExp")]:
        for version, body in _version_sections(_read(document), op):
            summary = body.split("Attributes")[0]
            assert sentence not in summary.replace("\n", " "), (document, version)
            if version != 11:
                assert sentence in onnx.defs.get_schema(op, version).doc.replace("\n", " ")
    empty = np.zeros((2, 0), dtype=np.float32)
    for op, want in [("ReduceSum", 0.0), ("ReduceL2", 0.0), ("ReduceLogSumExp", -np.inf)]:
        node = oh.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
        (y,) = backend.run_node(node, [empty], opset_version=1)
        np.testing.assert_array_equal(y, [want, want])
        (y,) = backend.run_node(oh.make_node(op, ["x"], ["y"]), [np.float32(-3.0)],
                                opset_version=1)
        assert y.shape == ()


def test_reduce_sum_txt_reuses_an_example_name():
    names = [e.name for e in EXAMPLES if e.document == "ReduceSum.txt"]
    assert names.count("test_reduce_sum_negative_axes_keepdims_random") == 2
    noop = [e for e in EXAMPLES if e.section == "_empty_axes_input_noop"]
    assert [e.name for e in noop] == ["test_reduce_sum_empty_axes_input_noop_example",
                                      "test_reduce_sum_negative_axes_keepdims_random"]

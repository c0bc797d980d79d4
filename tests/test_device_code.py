"""Device-correct code wherever a learner reads it (issue 48).

A learner on a GPU runs the reference, the course's helpers and the notebooks' cells, and copies the hints. A
tensor that a function makes without a device, next to the tensors of an input or a model it receives, stays on
the CPU and meets them on the GPU: the check ran on the CPU and passed, the next cell raises. So, in every `.py`
file of solutions_lib/ and course_lib/, every code cell of solutions/*/*.ipynb (notebooks/ is generated from
them) and the code of every hint (`<details><summary>Hint`): a tensor factory (torch.zeros, torch.arange, ...)
called inside a function or method that receives a tensor or a model takes `device=` (or is `*_like`,
`x.new_*`, or moved at once with `.to(x.device)`). A tensor meant for the CPU says so on its line,
`# cpu: <reason>`, and every such waiver must still waive something.

What "receives a tensor or model" means here (ast, no types): a parameter annotated Tensor or Module, named
model/module/net, or used as one in the function's body (`.device`, `.shape`, `.size(...)`, `.parameters()`,
`.tolist()`, ...), or `self` in a method other than __init__ of an nn.Module. A nested function or lambda
inherits it. A hint takes the context of the exercise whose solution cell sits under it. Factories wrapped
directly in nn.Parameter(...) or register_buffer(...) move with their module and are exempt; a tensor an
nn.Module's __init__ keeps as a plain attribute (self.t = torch.zeros(...)) does not, and is a finding.
"""
import ast
import io
import json
import re
import tokenize
from typing import NamedTuple

from autograder.release import HINT
from conftest import COURSE_MODULES, ROOT, SOLUTION_NOTEBOOKS, course_code

FACTORIES = {
    "zeros", "ones", "full", "empty", "arange", "range", "tensor", "randn", "rand", "randint", "randperm",
    "eye", "linspace", "logspace", "tril_indices", "triu_indices",
}
LIKE = {"zeros", "ones", "full", "empty", "rand", "randn", "randint"}  # torch.<name>_like exists
NEW = {"zeros", "ones", "full", "empty", "tensor"}  # x.new_<name> exists
TENSOR_ATTRS = {
    "device", "dtype", "shape", "size", "dim", "ndim", "numel", "unsqueeze", "squeeze", "view", "reshape", "flatten",
    "masked_fill", "masked_fill_", "float", "double", "long", "half", "bfloat16", "cpu", "cuda", "tolist", "item",
    "detach", "clone", "contiguous", "transpose", "permute", "expand", "softmax", "log_softmax", "argmax", "topk",
    "scatter", "scatter_", "gather", "index_select", "requires_grad", "requires_grad_", "grad", "new_zeros",
    "new_ones", "new_full", "new_empty", "new_tensor", "parameters", "named_parameters", "buffers", "state_dict",
    "load_state_dict", "eval", "train", "training", "modules", "children",
}
MODEL_NAMES = {"model", "module", "net"}
WAIVER = re.compile(r"#\s*cpu:\s*(\S.*)?$")
PARAMETER_WRAPPERS = {"Parameter", "register_buffer"}

NOTEBOOKS, MODULES = SOLUTION_NOTEBOOKS, COURSE_MODULES


# ---------------------------------------------------------------- the linter


def _receives(fn, module_class):
    """The name of a parameter of fn that is a tensor or a model (its device is there to follow), or None."""
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    found = None  # self, when fn is a method of an nn.Module other than __init__ (which builds before .to(dev))
    if params and params[0].arg in ("self", "cls") and not isinstance(fn, ast.Lambda):
        if module_class and params[0].arg == "self" and fn.name != "__init__":
            found = "self"
        params = params[1:]
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    used = {(_root(n.value), n.attr) for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Attribute)}
    tensors, models = [], []
    for p in params:
        note = ast.unparse(p.annotation) if p.annotation is not None else ""
        if re.search(r"\bModule\b", note) or p.arg in MODEL_NAMES:
            models.append(p.arg)
        elif re.search(r"\b(Long|Float)?Tensor\b", note) or any((p.arg, attr) in used for attr in TENSOR_ATTRS):
            tensors.append(p.arg)
    return next(iter(tensors + models), found)  # a tensor's .device reads best in the fix the test suggests


def _root(node):
    """x for x and for x[...] (x[:cut].tolist() uses x as a tensor too), else None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_module_class(cls):
    return any(re.search(r"\bModule\b", ast.unparse(base)) for base in cls.bases)


def _follows_a_device(to_call):
    """Whether `.to(...)` moves onto a device taken from somewhere (not a dtype, not the string "cpu")."""
    if any(k.arg == "device" for k in to_call.keywords):
        return True
    if not to_call.args:
        return False
    first = to_call.args[0]
    if isinstance(first, ast.Attribute):
        return first.attr == "device"
    if isinstance(first, ast.Name):
        return "dev" in first.id.lower() and "dtype" not in first.id.lower()
    if isinstance(first, ast.Call):
        return "device" in ast.unparse(first.func)
    return False


KEPT = ("self.register_buffer(name, tensor) (or nn.Parameter(tensor)): a tensor kept as a plain attribute of a module "
        "stays where it was made when model.to(dev) moves the module; if it is meant for the CPU, end the line with "
        "`# cpu: <reason>`")


def _is_factory(call):
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in FACTORIES
            and isinstance(func.value, ast.Name) and func.value.id == "torch")


def _fix(name, follow):
    x = follow or "x"
    device = f"next({x}.parameters()).device" if x in MODEL_NAMES or x == "self" else f"{x}.device"
    ways = [f"torch.{name}(..., device={device})"]
    if name in LIKE and x not in MODEL_NAMES and x != "self":
        ways.append(f"torch.{name}_like({x}, ...)")
    if name in NEW and x not in MODEL_NAMES and x != "self":
        ways.append(f"{x}.new_{name}(...)")
    return " or ".join(ways) + "; if it is meant for the CPU, end the line with `# cpu: <reason>`"


class Finding(NamedTuple):
    line: int  # in the source, cell or hint snippet
    call: str  # the factory call's source
    where: str  # the function it sits in (for a hint: the exercise)
    fix: str

    def say(self, place):
        return f"{place}, line {self.line}: `{self.call}` in `{self.where}` has no device; make it {self.fix}"


def lint(source, context=None):
    """Findings in Python source, and the lines whose waivers were used.

    context: None to judge each function by its parameters; a (function name, parameter) pair for a hint's code,
    which sits inside that exercise (parameter None: the exercise receives no tensor, nothing to follow).
    Raises SyntaxError when source does not parse.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    findings, used = [], set()

    def visit(node, follow, where, module_class):
        for child in ast.iter_child_nodes(node):
            f, w, m = follow, where, module_class
            if isinstance(child, ast.ClassDef):
                m = _is_module_class(child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                f = follow or _receives(child, module_class)
                w = getattr(child, "name", where or "<lambda>")
            elif isinstance(child, ast.Call) and follow:
                check(child, follow, where)
            visit(child, f, w, m)

    def check(call, follow, where, fix=None):
        func = call.func
        if not _is_factory(call):
            return
        if any(k.arg in ("device", None) for k in call.keywords) and not fix:  # device=..., or **kwargs
            return
        up = parents.get(call)
        if isinstance(up, ast.Attribute) and up.attr == "to" and _follows_a_device(parents.get(up)):
            return
        if isinstance(up, ast.Call) and call in up.args and ast.unparse(up.func).split(".")[-1] in PARAMETER_WRAPPERS:
            return  # nn.Parameter(torch.ones(d)): moves with its module
        span = range(call.lineno, call.end_lineno + 1)
        waived = [n for n in span if n <= len(lines) and WAIVER.search(lines[n - 1])]
        if waived:
            used.update(waived)
            return
        findings.append(Finding(call.lineno, ast.get_source_segment(source, call), where, fix or _fix(func.attr, follow)))

    def kept_on_a_module(cls):
        # self.t = torch.zeros(...) in an nn.Module's __init__: a plain attribute, which model.to(dev) leaves behind
        for init in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
            for node in ast.walk(init):
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                        for t in node.targets)):
                    check(node.value, "self", f"{cls.name}.__init__", KEPT)

    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and _is_module_class(cls):
            kept_on_a_module(cls)
    if context is None:
        visit(tree, None, None, False)
    else:
        name, follow = context  # a hint's code sits inside its exercise
        visit(tree, follow, name, False)
    return list({(f.line, f.call): f for f in findings}.values()), used  # once each, the first reason first


CALL = re.compile(r"\btorch\.(" + "|".join(sorted(FACTORIES, key=len, reverse=True)) + r")\s*\(")
MOVED = re.compile(r"\s*\.to\(\s*(device\s*=\s*)?[\w.()]*dev")  # .to(x.device), .to(dev), .to(device=...)


def lint_fragment(text, context):
    """A hint's code that does not parse: every factory call found by a regex, its arguments up to the closing
    parenthesis (or the fragment's end)."""
    name, follow = context
    if not follow:
        return []
    findings = []
    for m in CALL.finditer(text):
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        args = text[m.end() : end - 1 if depth == 0 else end]
        line_end = text.find("\n", end)
        line = text[text.rfind("\n", 0, m.start()) + 1 : len(text) if line_end < 0 else line_end]
        if re.search(r"\bdevice\s*=(?!=)|\*\*", args) or MOVED.match(text, end) or WAIVER.search(line):
            continue
        findings.append(Finding(text.count("\n", 0, m.start()) + 1, text[m.start() : end], name, _fix(m[1], follow)))
    return findings


def _code(source):
    """A cell's source with IPython's magics and shell lines blanked, so that ast reads it; lines keep their numbers."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def hint_snippets(markdown):
    """The code of a hint cell: fenced blocks, then the inline code spans outside them."""
    tiers = "\n\n".join(text for _, text in HINT.findall(markdown))
    fenced = re.findall(r"```[\w+-]*\n(.*?)```", tiers, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", tiers, flags=re.S))
    return [s for s in [*fenced, *inline] if "torch." in s]


def exercise_context(cells, at):
    """(name, parameter to follow) of the exercise whose solution cell comes after the hint cell `at`."""
    for cell in cells[at + 1 :]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            for node in ast.parse(_code("".join(cell["source"]))).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return node.name, _receives(node, False)
                if isinstance(node, ast.ClassDef):
                    module = _is_module_class(node)
                    methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                    return node.name, next((p for n in methods if (p := _receives(n, module))), None)
            break
    return "the exercise below", "x"  # no solution cell to read: judge strictly


def hint_findings(cells, at):
    context = exercise_context(cells, at)
    found = []
    for snippet in hint_snippets("".join(cells[at]["source"])):
        try:
            found += [(snippet, f) for f in lint(snippet, context)[0]]
        except SyntaxError:
            found += [(snippet, f) for f in lint_fragment(snippet, context)]
    return found


def _waiver_lines(source):
    """Lines whose comment is a `# cpu:` waiver (comments only, not strings)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return set()
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT and WAIVER.search(t.string)}


def sources():
    """(where, Python source) of every module and every solution notebook's code cell."""
    for file, cell, source in course_code():
        yield (file, source) if cell is None else (f"{file}, cell {cell[0]} (id {cell[1]})", _code(source))


# ---------------------------------------------------------------- the course's code


def test_the_sources_are_found():
    assert len(MODULES) > 20 and len(NOTEBOOKS) == 11


def test_every_tensor_made_in_a_function_that_receives_a_tensor_or_model_is_made_on_its_device():
    problems = [finding.say(where) for where, source in sources() for finding in lint(source)[0]]
    assert not problems, "tensors made off the device of what they meet:\n" + "\n".join(problems)


def test_every_hint_makes_its_tensors_on_the_device_of_the_exercises_inputs():
    problems = []
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "markdown" and "<details><summary>Hint" in "".join(cell["source"]):
                for snippet, finding in hint_findings(cells, i):
                    problems.append(finding.say(f"{path.relative_to(ROOT)}, cell {i} (hint to `{finding.where}`), "
                                                f"code `{snippet}`"))
    assert not problems, "hints that make tensors off the device of the exercise's inputs:\n" + "\n".join(problems)


def test_every_waiver_waives_something_and_says_why():
    unused, reasonless = [], []
    for where, source in sources():
        used = lint(source)[1]
        for n in sorted(_waiver_lines(source)):
            line = source.splitlines()[n - 1]
            if not (WAIVER.search(line)[1] or "").strip():
                reasonless.append(f"{where}, line {n}")
            if n not in used:
                unused.append(f"{where}, line {n}: {line.strip()}")
    assert not reasonless, f"a waiver says why the tensor belongs on the CPU: `# cpu: <reason>`: {reasonless}"
    assert not unused, "waivers on lines that need none (remove them):\n" + "\n".join(unused)


# ---------------------------------------------------------------- the linter itself


def _found(source, context=None):
    return [f.call for f in lint(source, context)[0]]


def test_a_tensor_made_without_a_device_next_to_an_input_is_found():
    bad = "def f(x):\n    return x + torch.zeros(x.size(0))\n"
    found = lint(bad)[0]
    assert [f.call for f in found] == ["torch.zeros(x.size(0))"]
    said = found[0].say("bad.py")
    assert "bad.py, line 2" in said and "device=x.device" in said and "torch.zeros_like(x, ...)" in said
    assert "x.new_zeros(...)" in said and "# cpu:" in said


def test_a_tensor_made_on_the_inputs_device_is_fine():
    assert _found("def f(x):\n    return x + torch.zeros(x.size(0), device=x.device)\n") == []
    assert _found("def f(x):\n    return torch.arange(3).to(x.device) + x\n") == []


def test_like_and_new_are_fine():
    assert _found("def f(x):\n    return torch.zeros_like(x) + x.new_ones(3) + torch.full_like(x, 2)\n") == []


def test_a_waiver_with_its_reason_is_honoured():
    src = "def f(x):\n    n = torch.tensor(x.tolist())  # cpu: only read back with .tolist()\n    return n\n"
    findings, used = lint(src)
    assert findings == [] and used == {2} and _waiver_lines(src) == {2}


def test_models_and_modules_count_but_plain_numbers_and_constructors_do_not():
    assert _found("def f(model, idx):\n    s = torch.zeros(1)\n    return model(idx)\n") == ["torch.zeros(1)"]
    assert _found("def mask(T):\n    return torch.ones(T, T).tril()\n") == []
    module = ("class M(nn.Module):\n    def __init__(self, d):\n        self.g = nn.Parameter(torch.ones(d))\n"
              "        self.register_buffer('b', torch.zeros(d))\n    def step(self):\n        return torch.zeros(1)\n")
    assert _found(module) == ["torch.zeros(1)"]  # self is a model in a method; __init__'s Parameter and buffer move
    kept = "class M(nn.Module):\n    def __init__(self, d):\n        self.b = torch.zeros(d, device='cpu')\n"
    assert _found(kept) == ["torch.zeros(d, device='cpu')"]  # a plain attribute: .to(dev) leaves it behind
    assert "register_buffer" in lint(kept)[0][0].fix


def test_a_hint_is_judged_in_its_exercises_context():
    cells = [
        {"cell_type": "markdown", "source": "<details><summary>Hint 2 · the approach</summary>\n\n"
                                            "Start with `ys, scores = idx, torch.zeros(1)`, then `.tril()` "
                                            "and `torch.full((1, 1), bos_id, …)`; `torch.arange(T, device=idx.device)`"
                                            ".\n\n</details>"},
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True}},
         "source": "def beam(model, idx, k):\n    ### BEGIN SOLUTION\n    return idx\n    ### END SOLUTION\n"},
    ]
    found = hint_findings(cells, 0)
    assert [f.call for _, f in found] == ["torch.zeros(1)", "torch.full((1, 1), bos_id, …)"]  # parsed; by regex
    cells[1]["source"] = "def one_hot(words, vocab):\n    return None\n"  # nothing to follow: no finding
    assert hint_findings(cells, 0) == []

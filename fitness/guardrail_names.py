"""What the names in a candidate stand for, read once before the guardrails walk it.

A name is bound to the dotted path it stands for through imports and plain aliases
(`import torch.nn.functional as F`, `from torch import mm`, `f = torch.mm`), so the
guardrails judge `F.linear`, `mm` and `f` as `torch.nn.functional.linear` and `torch.mm`.
Besides: the candidate's own top-level functions and classes, its nn.Module subclasses and
their __init__ methods (with the methods only __init__ calls, the one place torch may build
weights), what those set on self, and where a node stands in the tree.
"""

from __future__ import annotations

import ast

# Tensor methods that return a view or a copy of the same values (a tensor again).
TENSOR_VIEWS = frozenset(
    """reshape view view_as contiguous t transpose permute expand expand_as flatten unflatten
    unsqueeze squeeze narrow select as_strided clone detach to float double broadcast_to
    movedim swapaxes""".split()
)
TENSOR_ALLOC = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "tensor"})
# torch.nn classes that hold tensors rather than compute.
TORCH_PARAM_CLASSES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer"})


class CandidateNames:
    """The bindings of one parsed module."""

    def __init__(self, tree: ast.Module):
        self.parents: dict[int, ast.AST] = {}
        self.paths: dict[str, str] = {}  # local name -> the dotted path it stands for
        self.modules: set[str] = set()  # paths bound by `import`
        self.defs: set[str] = set()  # the candidate's own top-level functions and classes
        self.module_classes: set[str] = set()  # its nn.Module subclasses
        self.inits: set[int] = set()  # their __init__ methods: where torch may build weights
        self.torch_modules: dict[str, str] = {}  # self attribute -> torch.nn class
        self.self_tensors: set[str] = set()  # self attributes that hold tensors
        self.places: dict[int, ast.AST] = {}  # a getattr's stand-in attribute -> the call
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        binders = (ast.Import, ast.ImportFrom, ast.Assign)
        ordered = sorted(
            (n for n in ast.walk(tree) if isinstance(n, binders)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for _ in range(2):  # an alias of an alias bound further down
            for node in ordered:
                self._bind(node)
        for node in tree.body:
            self._define(node, tree)
        for node in ast.walk(tree):
            if id(node) in self.inits:
                self._bind_weights(node)

    def path(self, node: ast.AST) -> str | None:
        """The dotted path a Name, attribute chain or constant getattr stands for, if known."""
        if isinstance(node, ast.Name):
            return self.paths.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.path(node.value)
            return f"{base}.{node.attr}" if base else None
        if const_getattr(node):
            base = self.path(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    # --- where a node stands ------------------------------------------------------------

    def as_attribute(self, call: ast.Call) -> ast.Attribute:
        """`getattr(x, "name")` as the `x.name` it is, in the call's place in the tree."""
        attr = ast.Attribute(value=call.args[0], attr=call.args[1].value, ctx=ast.Load())
        ast.copy_location(attr, call)
        self.parents[id(attr)] = self.parents.get(id(call))
        self.places[id(attr)] = call
        return attr

    def is_outermost(self, node: ast.AST) -> bool:
        parent, place = self.parents.get(id(node)), self.places.get(id(node), node)
        return not (isinstance(parent, ast.Attribute) and parent.value is place)

    def is_func(self, node: ast.AST) -> bool:
        parent, place = self.parents.get(id(node)), self.places.get(id(node), node)
        return isinstance(parent, ast.Call) and parent.func is place

    def is_attr_call(self, node: ast.AST) -> bool:
        """`mod.f(...)` as written (not through an alias or a getattr)."""
        real = isinstance(node, ast.Attribute) and id(node) not in self.places
        return real and self.is_func(node)

    def is_value(self, node: ast.AST) -> bool:
        """Handed on rather than used in place: passed, stored, returned, iterated."""
        parent, node = self.parents.get(id(node)), self.places.get(id(node), node)
        if isinstance(parent, ast.Attribute) or self.is_func(node):
            return False
        if isinstance(parent, (ast.Import, ast.ImportFrom)):
            return False
        if node in getattr(parent, "decorator_list", ()):  # applied, as a call is
            return False
        if isinstance(parent, ast.Call) and const_getattr(parent) and parent.args[0] is node:
            return False
        alias = isinstance(parent, ast.Assign) and parent.value is node
        in_class = isinstance(self.parents.get(id(parent)), ast.ClassDef)  # a class attribute
        return in_class or not (alias and all(isinstance(t, ast.Name) for t in parent.targets))

    def is_docstring(self, node: ast.Constant) -> bool:
        expr = self.parents.get(id(node))
        owner = self.parents.get(id(expr))
        return (
            isinstance(expr, ast.Expr)
            and bool(getattr(owner, "body", None))
            and (owner.body[0] is expr)
        )

    def is_tensor(self, node: ast.AST, tensors: set[str]) -> bool:
        """Whether `node` surely holds a tensor, given the local names that do (forward's
        inputs and what it built from them): a guess that errs towards "no"."""
        if isinstance(node, ast.Name):
            return node.id in tensors
        if isinstance(node, (ast.Subscript, ast.Starred)):
            return self.is_tensor(node.value, tensors)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left, tensors) or self.is_tensor(node.right, tensors)
        if isinstance(node, ast.Attribute):
            owner = self_attr(node.value)
            return (
                self_attr(node) in self.self_tensors
                or (owner in self.torch_modules and node.attr in ("weight", "bias"))
                or (
                    node.attr in ("T", "mT", "H", "mH", "data")
                    and self.is_tensor(node.value, tensors)
                )
            )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            path = self.path(node.func) or ""
            if path.startswith("torch.") and node.func.attr in TENSOR_ALLOC:
                return True
            return node.func.attr in TENSOR_VIEWS and self.is_tensor(node.func.value, tensors)
        return False

    # --- the bindings ------------------------------------------------------------------

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                self.paths[local] = a.name if a.asname else local
                self.modules.add(self.paths[local])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                self.paths[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            path = self.path(node.value)
            for t in node.targets:
                if path:
                    self.paths[t.id] = path

    def _define(self, node: ast.AST, tree: ast.Module) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.defs.add(node.name)
        if isinstance(node, ast.ClassDef) and any(
            _is_torch_module(self.path(b)) or name_of(b) in self.module_classes for b in node.bases
        ):
            self.module_classes.add(node.name)
            self._find_inits(node, tree)

    def _find_inits(self, cls: ast.ClassDef, tree: ast.Module) -> None:
        """__init__, and the methods only __init__ names (`self.reset_parameters()`, as
        nn.Linear does): they run before any input exists. A method named anywhere else, by
        attribute or string, even in a lambda __init__ builds, runs later."""
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        inits = {f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"}
        while True:
            scopes = {id(f) for f in inits}
            more = {
                f
                for name, f in methods.items()
                if f not in inits and self._named_only_in(name, scopes, tree)
            }
            if not more:
                break
            inits |= more
        self.inits.update(id(f) for f in inits)

    def _named_only_in(self, name: str, scopes: set[int], tree: ast.Module) -> bool:
        mentions = [
            n
            for n in ast.walk(tree)
            if (isinstance(n, ast.Attribute) and n.attr == name)
            or (isinstance(n, ast.Constant) and n.value == name)
        ]
        return bool(mentions) and all(id(self._scope_of(n)) in scopes for n in mentions)

    def _scope_of(self, node: ast.AST) -> ast.AST | None:
        """The function or lambda whose body holds `node`."""
        node = self.parents.get(id(node))
        scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        while node is not None and not isinstance(node, scopes):
            node = self.parents.get(id(node))
        return node

    def _bind_weights(self, init: ast.FunctionDef) -> None:
        """`self.fc = nn.Linear(...)` makes fc a PyTorch module; `nn.Parameter(...)` or any
        other torch call, a tensor."""
        for node in ast.walk(init):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            made = self.path(node.value.func) or ""
            for t in node.targets:
                attr = self_attr(t)
                cls = made.rsplit(".", 1)[-1]
                if attr and made.startswith("torch.nn.") and cls[:1].isupper():
                    if cls in TORCH_PARAM_CLASSES:
                        self.self_tensors.add(attr)
                    else:
                        self.torch_modules[attr] = cls
                elif attr and made.startswith("torch."):
                    self.self_tensors.add(attr)


def _is_torch_module(path: str | None) -> bool:
    cls = (path or "").removeprefix("torch.nn.")
    return cls != path and cls[:1].isupper() and "." not in cls


def name_of(node: ast.AST | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def root_of(node: ast.AST) -> str | None:
    """The name an attribute chain, subscript or call chain starts from."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return name_of(node)


def self_attr(node: ast.AST) -> str | None:
    """`X` for `self.X`, else None."""
    if isinstance(node, ast.Attribute) and name_of(node.value) == "self":
        return node.attr
    return None


def subscript_root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


def const_getattr(node: ast.AST) -> bool:
    """`getattr(x, "name")`: an attribute access in another spelling."""
    return (
        isinstance(node, ast.Call)
        and name_of(node.func) == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )

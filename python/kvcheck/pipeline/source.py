"""Finding a library's inline cache statements in its source files and
compiling them unmodified.

A pipeline library keeps its cache bookkeeping inline: in a method of a
class that imports half the library (text encoders, VAEs, kernels), in a
branch of a long `inference` loop, in one statement of an `__init__`. The
adapters do not import those files: they parse them, pick the nodes, and
compile those nodes with the file's path (so tracebacks name the library's
lines) into functions and code objects they run on stand-in objects. Every
helper here raises RuntimeError naming the file and what it could not find,
so a checkout that moved the code is refused by name, never run half-found.
"""

import ast
import os
import sys
import types


def starts(prefix):
    """A test for `statements`: the statement's source starts with `prefix`."""
    return lambda s: s.startswith(prefix)


def parse(path):
    """The text of `path` and its syntax tree."""
    with open(path) as f:
        text = f.read()
    return text, ast.parse(text, filename=path)


def read(src, relative, project):
    """`src/relative` and its syntax tree; RuntimeError naming the file when
    the `project` checkout at `src` lacks it."""
    path = os.path.join(src, relative)
    if not os.path.isfile(path):
        raise RuntimeError("the %s checkout %s has no %s" % (project, src, relative))
    return path, parse(path)[1]


def find_class(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def find_method(tree, cls_name, name):
    cls = find_class(tree, cls_name)
    if cls is None:
        return None
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return None


def find_function(tree, name):
    """A module-level function."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def require_method(path, tree, cls_name, name):
    """The method node `cls_name.name`; RuntimeError naming it when missing."""
    node = find_method(tree, cls_name, name)
    if node is None:
        raise RuntimeError("%s has no %s.%s" % (path, cls_name, name))
    return node


def require_methods(path, tree, cls_name, names):
    """The method nodes `names` of class `cls_name`, in that order;
    RuntimeError naming the class or the first method missing."""
    if find_class(tree, cls_name) is None:
        raise RuntimeError("%s has no %s" % (path, cls_name))
    found = []
    for name in names:
        node = find_method(tree, cls_name, name)
        if node is None:
            raise RuntimeError("%s: %s has no %s" % (path, cls_name, name))
        found.append(node)
    return found


def walk_statements(body):
    """Every statement of `body` and of the blocks under it, in source order."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                yield from walk_statements(inner)


def statements(path, body, tests, what, optional=0):
    """The statements of `body` (searched recursively, in source order) that
    the `tests` pick, one each; RuntimeError naming the one missing. The
    first `optional` tests may find nothing (a patched file)."""
    found = []
    for index, test in enumerate(tests):
        hits = [node for node in walk_statements(body) if test(ast.unparse(node))]
        if not hits and index < optional:
            continue
        if len(hits) != 1:
            raise RuntimeError("%s: expected one statement for %s, found %d" % (path, what, len(hits)))
        found.append(hits[0])
    return found


def else_loop(path, function, test, iterable, what):
    """The `for ... in <iterable>:` directly in the `else:` of the
    `if <test>:` directly in `function`'s body (a pipeline's reset of an
    allocated cache); RuntimeError with `what` when there is none."""
    for node in function.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == test:
            for inner in node.orelse:
                if isinstance(inner, ast.For) and ast.unparse(inner.iter) == iterable:
                    return inner
    raise RuntimeError("%s: %s" % (path, what))


def compile_statements(path, nodes):
    """The nodes as one code object for `exec`, attributed to `path`."""
    import __future__

    # Annotations name the library's types (BlockMask, ...): left unevaluated.
    module = ast.Module(body=list(nodes), type_ignores=[])
    return compile(module, path, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)


def compile_functions(path, nodes, namespace):
    """Defines the function nodes in `namespace`; returns them by name."""
    exec(compile_statements(path, nodes), namespace)
    return {node.name: namespace[node.name] for node in nodes}


def bind(obj, functions):
    """`obj` with every function of `functions` (name -> function) bound as a method."""
    for name, function in functions.items():
        setattr(obj, name, types.MethodType(function, obj))
    return obj


def expression(path, source_text):
    """An expression of the library's source (`source_text`), compiled for eval."""
    return compile(ast.Expression(body=ast.parse(source_text, mode="eval").body), path, "eval", dont_inherit=True)


def keyword_in(node, name):
    """The source of the first `name=` keyword argument of a call under `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            for kw in sub.keywords:
                if kw.arg == name:
                    return ast.unparse(kw.value)
    return None


def dict_value_in(node, key):
    """The source of the first dict display entry `"key": ...` under `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict):
            for k, v in zip(sub.keys, sub.values):
                if isinstance(k, ast.Constant) and k.value == key:
                    return ast.unparse(v)
    return None


def module_constant(path, tree, name):
    """The value of the module-level `NAME = <literal>` of the file."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise RuntimeError("%s has no module constant %s" % (path, name))


def register_packages(src, names):
    """Registers each dotted package of `names` at its folder under `src`
    without running its `__init__` (which would import the whole library),
    so that a module inside it imports as it is; puts `src` on sys.path."""
    if src not in sys.path:
        sys.path.insert(0, src)
    for name in names:
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [os.path.join(src, *name.split("."))]
            sys.modules[name] = module

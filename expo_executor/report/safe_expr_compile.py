"""Compiling a safe expression (``safe_expr``): parse the text with :mod:`ast`, then build one closure
per node of the whitelist, so evaluation needs no dispatch and nothing outside the whitelist exists. Every
refusal is an :class:`ExpressionError` naming the construct; the limits are ``safe_expr``'s.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable, Mapping

from expo_executor.report.safe_expr import (ALLOWED, FUNCTION_NAMES, MAX_INT_BITS, MAX_ROUND_DIGITS,
                                            MAX_TEXT_CHARS, Evaluator, Expression, ExpressionError, Value,
                                            as_number, is_number, shorten)


def compile_expression(text: str) -> Expression:
    """Parse and validate ``text`` once; raise ExpressionError naming the offending construct."""
    if not isinstance(text, str):
        raise ExpressionError(repr(text), f"expected a string, got {type(text).__name__}", "pass the text")
    source = text.strip()
    if not source:
        raise ExpressionError(text, "the expression is empty", "write e.g. 'cost < 100'")
    if len(source) > MAX_TEXT_CHARS:
        raise ExpressionError(source, f"longer than {MAX_TEXT_CHARS} characters", "shorten the expression")
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal" for 1and: the error below says enough
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(
            source,
            f"syntax error at column {exc.offset}: {exc.msg}",
            'check quotes and parentheses; strings need quotes, e.g. variant == "bnb"',
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(source, f"cannot be parsed ({type(exc).__name__})", "simplify the expression") from None
    builder = Builder(source)
    try:
        run, names = builder.build(tree.body)
    except RecursionError:
        raise ExpressionError(source, "too deeply nested", "simplify the expression") from None
    return Expression(text=source, names=frozenset(names), _run=run)



# --- building: one closure per node, so evaluation needs no dispatch and nothing outside the whitelist exists ---

_ARITHMETIC: dict[type, tuple[str, Callable[[Value, Value], Value]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
}
_COMPARISONS: dict[type, tuple[str, Callable[[Value, Value], bool]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
}
_ORDERING = {"<", "<=", ">", ">="}
_FORBIDDEN_OPERATORS = {
    ast.BitAnd: ("bitwise operator '&'", "use 'and'"),
    ast.BitOr: ("bitwise operator '|'", "use 'or'"),
    ast.BitXor: ("operator '^'", "use ** for powers"),
    ast.LShift: ("shift operator '<<'", "use * 2 ** n"),
    ast.RShift: ("shift operator '>>'", "use // 2 ** n"),
    ast.MatMult: ("operator '@'", ALLOWED),
    ast.Invert: ("operator '~'", "use 'not' or '-'"),
    ast.Is: ("comparison 'is'", "use == or !="),
    ast.IsNot: ("comparison 'is not'", "use == or !="),
    ast.In: ("comparison 'in'", 'use == joined with or, e.g. variant == "a" or variant == "b"'),
    ast.NotIn: ("comparison 'not in'", 'use != joined with and, e.g. variant != "a" and variant != "b"'),
}
_FORBIDDEN_NODES = {
    ast.Attribute: ("attribute access", "use a column name, without dots"),
    ast.Subscript: ("subscript", "use a column name, without [ ]"),
    ast.Lambda: ("lambda", ALLOWED),
    ast.ListComp: ("comprehension", ALLOWED),
    ast.SetComp: ("comprehension", ALLOWED),
    ast.DictComp: ("comprehension", ALLOWED),
    ast.GeneratorExp: ("comprehension", ALLOWED),
    ast.JoinedStr: ("f-string", "use a plain \"string\""),
    ast.NamedExpr: ("assignment ':='", "compare with =="),
    ast.IfExp: ("conditional 'x if c else y'", "use and/or"),
    ast.List: ("list literal", ALLOWED),
    ast.Tuple: ("tuple literal", ALLOWED),
    ast.Set: ("set literal", ALLOWED),
    ast.Dict: ("dict literal", ALLOWED),
    ast.Starred: ("starred argument", "pass arguments one by one"),
    ast.Await: ("await", ALLOWED),
    ast.Yield: ("yield", ALLOWED),
    ast.YieldFrom: ("yield", ALLOWED),
    ast.Slice: ("slice", ALLOWED),
}


class Builder:
    """Turns a validated AST into nested closures, collecting the variable names it reads."""

    def __init__(self, source: str) -> None:
        self.source = source

    def build(self, node: ast.AST) -> tuple[Evaluator, set[str]]:
        handler = getattr(self, f"_build_{type(node).__name__}", None)
        if handler is None:
            construct, fix = _FORBIDDEN_NODES.get(type(node), (f"{type(node).__name__} expression", ALLOWED))
            self._reject(construct, node, fix)
        return handler(node)

    def _reject(self, construct: str, node: ast.AST, fix: str = ALLOWED) -> None:
        snippet = ast.get_source_segment(self.source, node) or ""
        where = f" {shorten(snippet)!r}" if snippet and snippet != self.source else ""
        raise ExpressionError(self.source, f"{construct}{where} is not allowed", fix)

    def _error(self, problem: str, fix: str = ALLOWED) -> ExpressionError:
        return ExpressionError(self.source, problem, fix)

    # leaves

    def _build_Constant(self, node: ast.Constant) -> tuple[Evaluator, set[str]]:
        value = node.value
        if isinstance(value, bool) or isinstance(value, (int, float)):
            pass
        elif isinstance(value, str):
            value = as_number(value)
        elif value is None:
            self._reject("None", node, "rows without a value are dropped (filters) or skipped (criteria) already")
        else:
            self._reject(f"{type(value).__name__} constant", node, ALLOWED)
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            self._reject("integer constant this large", node, "use a float (e.g. 1e300) or fewer digits")
        return (lambda values: value), set()

    def _build_Name(self, node: ast.Name) -> tuple[Evaluator, set[str]]:
        name = node.id
        return (lambda values: values[name]), {name}

    # operators

    def _build_BinOp(self, node: ast.BinOp) -> tuple[Evaluator, set[str]]:
        if type(node.op) in _FORBIDDEN_OPERATORS:
            construct, fix = _FORBIDDEN_OPERATORS[type(node.op)]
            self._reject(construct, node, fix)
        left, left_names = self.build(node.left)
        right, right_names = self.build(node.right)
        if isinstance(node.op, ast.Pow):
            run = self._power(left, right)
        else:
            symbol, function = _ARITHMETIC[type(node.op)]
            run = self._arithmetic(symbol, function, left, right)
        names = left_names | right_names
        if not names:
            run(_NO_VALUES)  # constant sub-expression: refuse e.g. 2 ** 10 ** 10 now, not at the first row
        return run, names

    def _arithmetic(self, symbol: str, function: Callable, left: Evaluator, right: Evaluator) -> Evaluator:
        def run(values: Mapping[str, Value]) -> Value:
            a, b = left(values), right(values)  # both sides, so a type error does not hide behind a None
            if a is None or b is None:
                return None
            if not (is_number(a) and is_number(b)):
                if symbol == "+" and isinstance(a, str) and isinstance(b, str):
                    return a + b
                raise self._error(
                    f"cannot apply '{symbol}' to {_describe(a)} and {_describe(b)}",
                    "arithmetic needs numbers; compare strings with == or !=",
                )
            try:
                return self._checked(function(a, b))
            except (ZeroDivisionError, OverflowError):
                return None

        return run

    def _power(self, left: Evaluator, right: Evaluator) -> Evaluator:
        def run(values: Mapping[str, Value]) -> Value:
            base, exponent = left(values), right(values)
            if base is None or exponent is None:
                return None
            if not (is_number(base) and is_number(exponent)):
                raise self._error(
                    f"cannot apply '**' to {_describe(base)} and {_describe(exponent)}", "powers need numbers"
                )
            if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
                if exponent * (abs(base).bit_length() - 1) > MAX_INT_BITS:
                    raise self._error(
                        f"power {base} ** {exponent} is too large (over {MAX_INT_BITS} bits)",
                        "use a smaller exponent or a float base (e.g. 2.0 ** n)",
                    )
            try:
                result = base**exponent
            except (ZeroDivisionError, OverflowError):
                return None
            if isinstance(result, complex):  # (-8) ** 0.5
                return None
            return self._checked(result)

        return run

    def _checked(self, result: Value) -> Value:
        if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            raise self._error(f"an integer result exceeds {MAX_INT_BITS} bits", "use floats (e.g. 1.0 * x)")
        return result

    def _build_UnaryOp(self, node: ast.UnaryOp) -> tuple[Evaluator, set[str]]:
        if type(node.op) in _FORBIDDEN_OPERATORS:
            construct, fix = _FORBIDDEN_OPERATORS[type(node.op)]
            self._reject(construct, node, fix)
        operand, names = self.build(node.operand)
        if isinstance(node.op, ast.Not):

            def run_not(values: Mapping[str, Value]) -> Value:
                value = operand(values)
                return None if value is None else not value

            return run_not, names
        symbol, function = ("-", operator.neg) if isinstance(node.op, ast.USub) else ("+", operator.pos)

        def run_sign(values: Mapping[str, Value]) -> Value:
            value = operand(values)
            if value is None:
                return None
            if not is_number(value):
                raise self._error(f"cannot apply unary '{symbol}' to {_describe(value)}", "signs need numbers")
            return function(value)

        return run_sign, names

    def _build_BoolOp(self, node: ast.BoolOp) -> tuple[Evaluator, set[str]]:
        built = [self.build(value) for value in node.values]
        operands = [run for run, _ in built]
        names = set().union(*(names for _, names in built))
        is_and = isinstance(node.op, ast.And)

        def run(values: Mapping[str, Value]) -> Value:
            # Kleene logic: a decisive operand (falsy for and, truthy for or) wins even next to an unknown one.
            unknown = False
            result: Value = None
            for operand in operands:
                result = operand(values)
                if result is None:
                    unknown = True
                elif bool(result) != is_and:
                    return result
            return None if unknown else result

        return run, names

    def _build_Compare(self, node: ast.Compare) -> tuple[Evaluator, set[str]]:
        for op in node.ops:
            if type(op) in _FORBIDDEN_OPERATORS:
                construct, fix = _FORBIDDEN_OPERATORS[type(op)]
                self._reject(construct, node, fix)
        built = [self.build(operand) for operand in [node.left, *node.comparators]]
        operands = [run for run, _ in built]
        names = set().union(*(names for _, names in built))
        comparisons = [_COMPARISONS[type(op)] for op in node.ops]

        def run(values: Mapping[str, Value]) -> Value:
            unknown = False
            left = operands[0](values)
            for (symbol, function), right_run in zip(comparisons, operands[1:]):
                right = right_run(values)
                if left is None or right is None:
                    unknown = True
                else:
                    if symbol in _ORDERING and not _orderable(left, right):
                        raise self._error(
                            f"cannot compare {_describe(left)} {symbol} {_describe(right)}",
                            "order numbers with numbers and strings with strings",
                        )
                    if not function(left, right):
                        return False
                left = right
            return None if unknown else True

        return run, names

    # functions

    def _build_Call(self, node: ast.Call) -> tuple[Evaluator, set[str]]:
        if not isinstance(node.func, ast.Name):
            self.build(node.func)  # names the construct, e.g. attribute access in os.system(...)
            self._reject("call", node, f"the only functions are {', '.join(FUNCTION_NAMES)}")
        name = node.func.id
        if name not in FUNCTION_NAMES:
            self._reject(f"call to {name!r}", node, f"the only functions are {', '.join(FUNCTION_NAMES)}")
        if node.keywords:
            self._reject("keyword argument", node, f"pass the arguments of {name}() by position")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self._reject("starred argument", arg, "pass arguments one by one")
        low, high = {"abs": (1, 1), "sqrt": (1, 1), "exp": (1, 1), "log": (1, 2), "round": (1, 2)}.get(name, (2, 64))
        if not low <= len(node.args) <= high:
            wanted = f"{low}" if low == high else f"{low} to {high}" if high < 64 else f"at least {low}"
            count = f"{len(node.args)} argument" + ("" if len(node.args) == 1 else "s")
            self._reject(f"{name}() with {count}", node, f"{name}() takes {wanted}")
        built = [self.build(arg) for arg in node.args]
        arguments = [run for run, _ in built]
        names = set().union(*(names for _, names in built))
        function = getattr(self, f"_call_{name}")

        def run(values: Mapping[str, Value]) -> Value:
            args = [argument(values) for argument in arguments]
            if any(arg is None for arg in args):
                return None
            for arg in args:
                if not is_number(arg):
                    raise self._error(f"{name}() needs numbers, got {_describe(arg)}", f"pass numbers to {name}()")
            try:
                return self._checked(function(*args))
            except (ZeroDivisionError, OverflowError):
                return None
            except ValueError as exc:
                if isinstance(exc, ExpressionError):
                    raise
                return None  # math domain error: log(0), sqrt(-1), round(nan)

        if not names:
            run(_NO_VALUES)
        return run, names

    @staticmethod
    def _call_abs(x: Value) -> Value:
        return abs(x)

    @staticmethod
    def _call_min(*args: Value) -> Value:
        return min(args)

    @staticmethod
    def _call_max(*args: Value) -> Value:
        return max(args)

    def _call_round(self, x: Value, digits: Value = None) -> Value:
        if digits is None:
            return round(x)
        if isinstance(digits, float) and digits.is_integer():
            digits = int(digits)
        if not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS:
            raise self._error(
                f"round() digits must be a whole number within ±{MAX_ROUND_DIGITS}, got {digits!r}",
                "use e.g. round(x, 2)",
            )
        return round(x, digits)

    @staticmethod
    def _call_sqrt(x: Value) -> Value:
        return math.sqrt(x)

    @staticmethod
    def _call_log(x: Value, base: Value = None) -> Value:
        return math.log(x) if base is None else math.log(x, base)

    @staticmethod
    def _call_exp(x: Value) -> Value:
        return math.exp(x)


_NO_VALUES: Mapping[str, Value] = {}


def _orderable(a: Value, b: Value) -> bool:
    return (is_number(a) and is_number(b)) or (isinstance(a, str) and isinstance(b, str))


def _describe(value: Value) -> str:
    if isinstance(value, str):
        return f"string {shorten(value, 30)!r}"
    return f"{type(value).__name__} {shorten(repr(value), 30)}"


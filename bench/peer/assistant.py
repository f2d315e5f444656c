"""The peer's assistant: a calculator tool, the model the scripted server stands for."""

import ast
import operator
import os

from django_ai_assistant import AIAssistant, method_tool
from langchain_openai import ChatOpenAI

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("not arithmetic")


class CalculatorAssistant(AIAssistant):
    id = "calculator_assistant"
    name = "Calculator"
    instructions = "You answer questions, using the calculator for arithmetic."
    # Its own name: compare.py tells its requests from the app's and the bare loop's.
    model = "bench-peer-model"

    def get_llm(self):
        # The scripted OpenAI-compatible server of the benchmark, not OpenAI.
        return ChatOpenAI(model=self.model, base_url=os.environ["PEER_LLM_URL"], api_key="sk-bench")

    @method_tool
    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression (numbers, + - * / **, parentheses)."""
        return str(_evaluate(ast.parse(expression, mode="eval").body))

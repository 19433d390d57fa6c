"""Test-only Python-module exercise (the grader's own tests, tests/kinds/): what a learner's
module for a Python exercise looks like to the grader."""
import torch


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha


def argmax(x: torch.Tensor) -> torch.Tensor:
    return torch.argmax(x, dim=-1)

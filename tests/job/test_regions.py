"""compile_scope="blocks" finds the repeated block: the largest nn.ModuleList of one class, named; a model without one
is refused by name. The compile itself: tests/job/test_inductor_phases.py."""

from __future__ import annotations

import pytest
import torch

import tcbench as tc
from tcbench.job.backends.inductor import repeated_blocks


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.ModuleList([Block(2) for _ in range(5)])
        self.layers = torch.nn.ModuleList([Block(16) for _ in range(3)])
        self.mixed = torch.nn.ModuleList([Block(32), torch.nn.Linear(32, 32)])   # not one class: never a region


def test_the_largest_list_of_one_class_is_the_region():
    name, blocks = repeated_blocks(Net())
    assert name == "layers" and len(blocks) == 3 and all(isinstance(b, Block) for b in blocks)


def test_a_wrapped_model_names_its_blocks_as_the_model_does():
    wrapper = torch.nn.Module()
    wrapper.module = Net()   # as DistributedDataParallel holds it
    assert repeated_blocks(wrapper)[0] == "layers"


def test_the_catalog_models_have_their_blocks():
    assert repeated_blocks(tc.build_model("gpt2", "tiny"))[0] == "transformer.h"
    assert repeated_blocks(tc.build_model("bert-base-cased", "tiny"))[0] == "bert.encoder.layer"


def test_a_model_without_repeated_blocks_is_refused_by_name():
    with pytest.raises(ValueError, match="compile_scope='blocks' is not allowed for Linear.*allowed: compile_scope='model'"):
        repeated_blocks(torch.nn.Linear(2, 2))


def test_the_scope_is_a_checked_field():
    with pytest.raises(tc.SpecError) as e:
        tc.JobSpec(compile_scope="layers")
    assert e.value.field == "compile_scope" and "'blocks'" in str(e.value)

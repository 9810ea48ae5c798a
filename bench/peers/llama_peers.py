"""A Hugging Face Llama directory under PyTorch's data-parallel tools (bench/peers/llama_run drives it).

One rank of a run (bench/peers/peer_common.py: launch, data, the timed loop). The model is the
project's independent reference (tests/reference/hf_llama.py: transformers' eager Llama, op for op),
its weights read from the same safetensors files zero-train --model reads; the data are the same
windows of the same llm.c token shard.
"""
import os
import sys

import torch

import peer_common

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import hf_llama  # noqa: E402


class Llama(torch.nn.Module):
    """The reference's functional model as a module, so that DDP sees its parameters. Parameter
    names cannot hold dots: HF's names are kept beside them, in the reference's order."""

    def __init__(self, directory):
        super().__init__()
        self.config = hf_llama.load_config(os.path.join(directory, "config.json"))
        loaded = hf_llama.load_params(directory, self.config, torch.float32)
        self.names = [name for name, _, _ in hf_llama.param_specs(self.config)]
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(loaded[name]) for name in self.names)

    def forward(self, inputs, targets):
        return hf_llama.forward_loss(self.config, dict(zip(self.names, self.weights)), inputs, targets)


def main():
    a = peer_common.arguments("A Hugging Face Llama (the reference) under PyTorch's data-parallel tools")
    a.add_argument("--model", required=True, help="Hugging Face model directory")
    o = a.parse_args()
    if not o.seq:
        a.error("--seq is required")
    rank, ranks = peer_common.start(o)
    peer_common.run(o, Llama(o.model), peer_common.read_tokens(o), o.seq, rank, ranks)


if __name__ == "__main__":
    main()

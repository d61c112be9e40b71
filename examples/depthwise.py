"""A depthwise convolution becomes one lookup table per channel.

Part 1 is the smallest case: a depthwise ``Conv1d`` with 3 channels, kernel 3 and all weights 1, over 2-bit
inputs. Each channel is an independent unit that reads 3 inputs of 2 bits, so its whole function is a table
of 4**3 = 64 rows, and every row's output is the sum of its input codes.

Part 2 is a block as it appears in a trained network: convolution, batch norm, ReLU and a 2-bit quantizer.
Built-in rules fuse it into one table per channel whose outputs are the quantizer's codes; the example then
checks the tables against the block itself.

Run it with ``python examples/depthwise.py``.
"""

from __future__ import annotations

import torch
from torch import nn

import iotable


def format_row(inputs: tuple[int, ...], outputs: tuple[float, ...]) -> str:
    """One table row as ``(a, b, c) -> y``."""
    shown = ", ".join(f"{v:g}" for v in outputs)
    return f"{inputs} -> {shown}"


def print_rows(table: iotable.IOTable, first: int, highlight: tuple[tuple[int, ...], ...] = ()) -> None:
    """Print a table's first rows, then the highlighted rows looked up by their input codes."""
    print(table)
    for inputs, outputs in list(table)[:first]:
        print("   ", format_row(inputs, outputs))
    print(f"    ... {table.rows - first} more rows")
    for codes in highlight:
        print("   ", format_row(codes, tuple(table.lookup(codes).tolist())))


def depthwise_seed() -> None:
    """Three channels, kernel 3, weights 1, 2-bit inputs: three tables of 64 rows."""
    conv = nn.Conv1d(3, 3, kernel_size=3, groups=3, bias=False)
    nn.init.ones_(conv.weight)
    iotable.decompose(conv, groups=3)  # three independent units, one per channel group
    result = iotable.precompute(conv, input_domain=iotable.Domain.uniform(2))
    print(result.summary())

    highlight = ((2, 2, 2), (1, 1, 1), (3, 3, 3))
    for table in result:
        print()
        print_rows(table, first=4, highlight=highlight)

    # Fail loudly if the tables are wrong: every row's output is the sum of its input codes.
    assert len(result) == 3
    for table in result:
        assert (table.rows, table.fan_in, table.fan_out) == (64, 3, 1)
        assert (table.outputs[:, 0] == table.inputs.sum(axis=1)).all()
        assert table.lookup([[2, 2, 2], [1, 1, 1], [3, 3, 3]])[:, 0].tolist() == [6.0, 3.0, 9.0]


def fused_block() -> None:
    """Conv1d + BatchNorm1d + ReLU + Quantize: one table per channel, outputs are 2-bit codes."""
    # Decorated, the block is one layer (a black box); undecorated, precompute() would treat it as a whole
    # model and return a table network. Either way the chain fuses into one table per channel.
    block = iotable.decompose(
        nn.Sequential(
            nn.Conv1d(4, 4, 3, groups=4, padding=1),
            nn.BatchNorm1d(4),
            nn.ReLU(),
            iotable.nn.Quantize(2, scale=0.5),
        )
    )
    with torch.no_grad():  # stand-ins for trained parameters
        block[0].weight.copy_(
            torch.tensor([[[0.5, 0.25, 0.25]], [[1.0, -1.0, 0.5]], [[0.25, 0.5, 1.0]], [[-0.5, 1.0, -0.5]]])
        )
        block[0].bias.fill_(0.0)
        block[1].running_mean.fill_(0.5)
        block[1].running_var.fill_(0.25)
    domain = iotable.Domain.uniform(2)
    result = iotable.precompute(block, input_domain=domain)
    print(result.summary())
    print()
    print_rows(result[0], first=8)

    # The tables equal the block bit for bit: look up every interior window of a random input.
    codes = torch.randint(0, len(domain), (1, 4, 10), generator=torch.Generator().manual_seed(0))
    expected = block.eval()(torch.tensor(domain.values, dtype=torch.float32)[codes])
    expected = block[-1].domain.encode(expected)[0]
    for channel, table in enumerate(result):
        windows = codes[0, channel].unfold(0, 3, 1).numpy()  # inputs of output positions 1..8
        assert (table.lookup(windows)[:, 0] == expected[channel, 1:-1]).all()
    print(f"\nchecked against the block: {len(result)} tables x 8 positions agree")


def main() -> None:
    print("== Part 1: depthwise Conv1d, weights 1 ==")
    depthwise_seed()
    print("\n== Part 2: fused Conv1d + BatchNorm1d + ReLU + Quantize ==")
    fused_block()


if __name__ == "__main__":
    main()

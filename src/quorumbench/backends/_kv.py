"""Key/value-cache plumbing for the transformers backend.

Two shapes of cache are used:

* ``KV``: a plain list of per-layer ``(keys, values)`` tensors, ``[batch, heads, seq,
  dim]``, used for shared prompt prefixes (the few-shot primer) computed once and
  copied into each batch.
* :class:`SlotCache`: preallocated buffers for the rows being decoded together. All
  rows are left-padded to one shared write column, so a finished row's slot can be
  refilled with a new prompt without copying the other rows (continuous batching).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]


def kv_from_cache(cache: Any) -> KV:
    """The per-layer tensors of a transformers ``DynamicCache``."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_from_kv(kv: KV | None, batch: int = 1) -> DynamicCache:
    """A fresh ``DynamicCache`` holding ``kv`` repeated ``batch`` times (copied)."""
    if not kv:
        return DynamicCache()
    return DynamicCache(
        ddp_cache_data=[(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in kv]
    )


def crop_kv(kv: KV, length: int) -> KV:
    """The first ``length`` positions of ``kv`` (views)."""
    return [(k[:, :, :length], v[:, :, :length]) for k, v in kv]


def supports_fast_path(cache: Any) -> bool:
    """True when every layer is a plain (non-sliding) dynamic layer we can manage."""
    return bool(cache.layers) and all(
        type(layer) is DynamicLayer and not layer.is_sliding for layer in cache.layers
    )


class _SlotLayer(DynamicLayer):  # type: ignore[misc]
    """A cache layer whose storage is a slice of the shared slot buffers."""

    def __init__(self, owner: SlotCache, index: int) -> None:
        super().__init__()
        self._owner = owner
        self._index = index
        keys = owner.keys[index]
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self.keys = keys[:, :, : owner.length]
        self.values = owner.values[index][:, :, : owner.length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._owner.length
        end = start + key_states.shape[-2]
        keys, values = self._owner.keys[self._index], self._owner.values[self._index]
        keys[:, :, start:end] = key_states
        values[:, :, start:end] = value_states
        self.keys, self.values = keys[:, :, :end], values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._owner.length


class SlotCache:
    """Per-layer ``[slots, heads, capacity, dim]`` buffers and the shared write column.

    Row ``s`` holds its tokens in columns ``[length - sizes[s], length)``; columns to
    the left are padding, masked out by ``mask``.
    """

    def __init__(self, template: KV, slots: int, capacity: int, start: int) -> None:
        self.keys = [
            torch.zeros((slots, k.shape[1], capacity, k.shape[3]), dtype=k.dtype, device=k.device)
            for k, _ in template
        ]
        self.values = [
            torch.zeros((slots, v.shape[1], capacity, v.shape[3]), dtype=v.dtype, device=v.device)
            for _, v in template
        ]
        device = template[0][0].device
        self.mask = torch.zeros((slots, capacity), dtype=torch.long, device=device)
        self.sizes = torch.zeros(slots, dtype=torch.long, device=device)
        self.length = start

    @property
    def slots(self) -> int:
        return self.mask.shape[0]

    @property
    def capacity(self) -> int:
        return self.mask.shape[1]

    def place(self, slot: int, kv: KV) -> None:
        """Put one prefilled row (``[1, heads, n, dim]`` per layer) into ``slot``."""
        n = kv[0][0].shape[2]
        if n > self.length:
            raise ValueError(f"row of {n} tokens does not fit left of column {self.length}")
        for layer, (k, v) in enumerate(kv):
            self.keys[layer][slot, :, self.length - n : self.length] = k[0]
            self.values[layer][slot, :, self.length - n : self.length] = v[0]
        self.mask[slot].zero_()
        self.mask[slot, self.length - n : self.length] = 1
        self.sizes[slot] = n

    def step_cache(self) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """A cache view, attention mask and position ids for one decode step."""
        if self.length + 1 > self.capacity:
            self._grow()
        self.mask[:, self.length] = 1
        cache = DynamicCache()
        cache.layers = [_SlotLayer(self, i) for i in range(len(self.keys))]
        positions = self.sizes.unsqueeze(1).clone()
        return cache, self.mask[:, : self.length + 1], positions

    def advance(self) -> None:
        """Record that every slot received one more token at the write column."""
        self.length += 1
        self.sizes += 1

    def keep(self, slots: list[int]) -> None:
        """Drop every slot not in ``slots`` (in that order)."""
        index = torch.tensor(slots, dtype=torch.long, device=self.mask.device)
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.mask = self.mask.index_select(0, index)
        self.sizes = self.sizes.index_select(0, index)

    def compact(self, reserve: int) -> None:
        """Shift everything left so that only ``reserve`` or the longest row's columns stay."""
        longest = int(self.sizes.max().item()) if self.slots else 0
        shift = self.length - max(reserve, longest)
        if shift <= 0:
            return
        keep = self.length - shift
        for buffers in (self.keys, self.values):
            for buffer in buffers:
                buffer[:, :, :keep] = buffer[:, :, shift : self.length].clone()
        self.mask[:, :keep] = self.mask[:, shift : self.length].clone()
        self.mask[:, keep:] = 0
        self.length = keep

    def _grow(self) -> None:
        extra = self.capacity
        self.keys = [torch.nn.functional.pad(k, (0, 0, 0, extra)) for k in self.keys]
        self.values = [torch.nn.functional.pad(v, (0, 0, 0, extra)) for v in self.values]
        self.mask = torch.nn.functional.pad(self.mask, (0, extra))

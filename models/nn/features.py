"""What a model's head sees, kept for appearance: the feature maps fed to the head on the last forward, and the
feature of any of its eval prediction rows (the head's input at that row's cell), for a tracker's re-identification
without a second network.

Every head here (Detect, AnchorFreeDetect and their segment heads) lays its eval predictions out level by level, each
level as `na` predictions per cell in (anchor, row, column) order (na = 1 for the anchor-free heads), so a row's cell
follows from the maps' sizes alone. A level's channels are averaged in equal consecutive groups down to the narrowest
level's count (as Ultralytics' `auto` ReID pools them), so every row's feature has the same length.
"""

import torch
from torch import nn
from torch.nn import functional as F


class HeadInputTap:
    """Made by Model.tap_head_inputs, used as a context around a forward: `with model.tap_head_inputs() as tap:
    model(x)` keeps the head's input maps of that forward (the hook is removed on leaving); tap.rows(index) then
    gives the features of eval prediction rows of its first image."""

    def __init__(self, head: nn.Module):
        self.head, self.rows_per_cell = head, int(head.na)
        self.maps: list[torch.Tensor] | None = None
        self._handle = None

    def __enter__(self) -> "HeadInputTap":
        self._handle = self.head.register_forward_pre_hook(self._keep)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def _keep(self, module: nn.Module, inputs: tuple) -> None:
        self.maps = list(inputs[0])

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """(k, C) float32 features of the first image's prediction rows index (k,) of the last forward; C is the
        narrowest level's channel count."""
        if self.maps is None:
            raise RuntimeError("no forward ran inside the tap's context")
        index = index.long().to(self.maps[0].device)
        width = min(m.shape[1] for m in self.maps)
        out = torch.zeros((len(index), width), dtype=torch.float32, device=self.maps[0].device)
        start = 0
        for level in self.maps:
            cells = level.shape[2] * level.shape[3]
            rows = cells * self.rows_per_cell
            chosen = (index >= start) & (index < start + rows)
            if chosen.any():
                flat = level[0].reshape(level.shape[1], cells).float()  # (C, cells)
                picked = flat[:, (index[chosen] - start) % cells].T  # (k, C)
                out[chosen] = F.adaptive_avg_pool1d(picked[:, None], width)[:, 0]
            start += rows
        return out

"""A conditional diffusion model over federated embeddings (FedAds' Diffu-AT, Wei et al., SIGIR 2023, Sec. 5).

The label party learns ``p(h_N | y, h_L)``: the federated embedding ``h_N`` it received for an aligned
row, given the row's label ``y`` and its own representation ``h_L``. The state is the concatenation
``z = [h_N ; y ; h_L]``; only the ``h_N`` part is noised (the condition part stays clean), with

- a linear beta schedule over ``T`` steps (the paper: 1000; here configurable, default 100), the
  betas scaled by ``1000 / T`` (Nichol & Dhariwal 2021) so that a short chain still ends near pure
  noise (``alpha_bar_T`` about ``e^-10`` at T = 100, as at T = 1000 with the paper's 1e-4..0.02);
- a sinusoidal timestep encoding (Vaswani et al. 2017; Ho et al. 2020);
- the simplified DDPM loss ``E || eps - eps_theta(sqrt(abar_t) h_N + sqrt(1 - abar_t) eps, y, h_L, t) ||^2``
  with ``t`` uniform (Ho et al. 2020, Eq. 14);
- ancestral sampling from Gaussian noise, the condition part replaced by ``[y ; h_L]`` at every step.

The schedule, the forward noising and the reverse step are ``diffusers``' :class:`DDPMScheduler`
(linear betas, ``fixed_small`` variance, epsilon prediction). The reverse step is elementwise, so
stepping the ``h_N`` part and re-attaching the condition is the same as stepping the whole ``z`` and
overwriting its condition part; the denoiser sees ``z`` with the condition replaced before every call
(``on_step`` shows it, the tests check it).

Ranges (``DiffusionConfig.clip_sample``, on by default). DDPM clips its estimate of ``x_0`` to the data's
range at every reverse step (Ho et al. 2020 clip images to [-1, 1]; ``diffusers``' ``clip_sample``).
Embeddings are not images, so the range is each dimension's own, seen in the fitted rows: at every step
the ``x_0`` implied by the predicted noise is clipped to it and the noise recomputed from the clipped
``x_0`` before the scheduler steps. The condition is clamped to its fitted range too, so a row of the
unaligned set whose ``h_L`` leaves that range is not extrapolated. Why it matters: a ReLU bottom's
``h_N`` has many nearly constant dimensions (a spike at zero, rare excursions) and ``h_L`` many nearly
dead ones; standardised, they turn into huge values. On the FedAds-like generator unclipped samples came
out 5 times too large on average, and the top model's score of them spread 59 times as widely as that
of the real ``h_N``; clipped, 1.3 and 1.4 times (benchmarks/RESULTS.md, "Diffu-AT's samples clipped to
the fitted range"; ``benchmarks/unaligned_bounds.py --fidelity``).

Speed: the denoiser's first layer is linear in ``[x_t ; c ; temb(t)]``, so the condition's share is
computed once per sample and the timestep's once per step; each step then costs two small matrix
products per row. Inputs are standardised per dimension with statistics of the training rows.

Needs ``diffusers`` (the ``nn`` extra: ``pip install "ray_vfl[nn]"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ...config import ValidatedConfig, check_float, check_int
from ...errors import ConfigError, DataError, NotFittedError

__all__ = ["DiffusionConfig", "ConditionalDiffusion", "Denoiser", "timestep_encoding", "make_scheduler"]


@dataclass(frozen=True)
class DiffusionConfig(ValidatedConfig):
    """Hyper-parameters of the conditional diffusion model.

    Parameters
    ----------
    steps : int
        Diffusion steps ``T`` (training and sampling), in [1, 10000]; the paper uses 1000.
    beta_start, beta_end : float or None
        Ends of the linear beta schedule; ``None``: the DDPM values 1e-4 and 0.02 scaled by ``1000 / steps``
        (capped at 0.999).
    hidden : tuple of int
        Widths of the denoiser's SiLU layers.
    time_dim : int
        Width of the sinusoidal timestep encoding (even).
    epochs, batch_size, learning_rate : training of the denoiser (Adam).
    clip_sample : bool
        Clip the ``x_0`` estimate of every reverse step to each dimension's fitted range, and the condition
        to its fitted range (the module docstring says why). ``False``: the unclipped sampler.
    seed : int
        Seeds the denoiser's initialisation, its training batches and the sampling noise.

    Example
    -------
    >>> DiffusionConfig(steps=0)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: steps must be an integer in [1, 10000], got 0
    """

    steps: int = 100
    beta_start: float | None = None
    beta_end: float | None = None
    hidden: tuple[int, ...] = (64, 64)
    time_dim: int = 32
    epochs: int = 20
    batch_size: int = 256
    learning_rate: float = 2e-3
    clip_sample: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.hidden, list):
            object.__setattr__(self, "hidden", tuple(self.hidden))
        check_int("steps", self.steps, 1, 10_000)
        for name in ("beta_start", "beta_end"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0, 0.999, lo_open=True)
        if self.beta_start is not None and self.beta_end is not None and self.beta_start > self.beta_end:
            raise ConfigError(f"beta_start must not exceed beta_end, got {self.beta_start} > {self.beta_end}")
        if not isinstance(self.hidden, tuple) or not self.hidden or any(
                isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= 65_536 for h in self.hidden):
            raise ConfigError(f"hidden must be a non-empty tuple of widths in [1, 65536], got {self.hidden!r}")
        check_int("time_dim", self.time_dim, 2, 4096)
        if self.time_dim % 2:
            raise ConfigError(f"time_dim must be even (sine and cosine halves), got {self.time_dim}")
        check_int("epochs", self.epochs, 1, 100_000)
        check_int("batch_size", self.batch_size, 1, 1_000_000)
        check_float("learning_rate", self.learning_rate, 0.0, 10.0, lo_open=True)
        if not isinstance(self.clip_sample, bool):
            raise ConfigError(f"clip_sample must be True or False, got {self.clip_sample!r}")
        check_int("seed", self.seed, 0, 2**31 - 1)

    def betas(self) -> tuple[float, float]:
        """``(beta_start, beta_end)`` of the linear schedule."""
        scale = 1000.0 / self.steps
        end = self.beta_end if self.beta_end is not None else min(0.02 * scale, 0.999)
        start = self.beta_start if self.beta_start is not None else min(1e-4 * scale, end)
        return start, end


def make_scheduler(config: DiffusionConfig) -> Any:
    """``diffusers``' DDPM scheduler for ``config`` (linear betas, epsilon prediction; its clipping to one
    scalar range is off: :class:`ConditionalDiffusion` clips per dimension)."""
    try:
        from diffusers import DDPMScheduler
    except ModuleNotFoundError as exc:
        raise ConfigError("Diffu-AT needs diffusers: pip install 'diffusers>=0.30' (or the nn extra: "
                          f"pip install 'ray_vfl[nn]'); import failed: {exc}") from exc
    start, end = config.betas()
    scheduler = DDPMScheduler(num_train_timesteps=config.steps, beta_start=start, beta_end=end, beta_schedule="linear",
                              variance_type="fixed_small", clip_sample=False, prediction_type="epsilon")
    scheduler.set_timesteps(config.steps)  # every step, T-1 down to 0
    return scheduler


def timestep_encoding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal encoding of integer timesteps ``t`` (shape ``(n,)``) into ``(n, dim)``.

    Example
    -------
    >>> timestep_encoding(torch.tensor([0, 5]), 4).shape
    torch.Size([2, 4])
    """
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = t.to(torch.float32)[:, None] * freqs[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class Denoiser(nn.Module):
    """``eps_theta(x_t, c, t)``: a SiLU MLP whose first layer adds ``W_x x_t + W_c c + W_t temb(t)``."""

    def __init__(self, x_dim: int, cond_dim: int, hidden: Sequence[int], time_dim: int) -> None:
        super().__init__()
        self.x_dim, self.cond_dim, self.time_dim = x_dim, cond_dim, time_dim
        width = hidden[0]
        self.x_in = nn.Linear(x_dim, width)
        self.c_in = nn.Linear(cond_dim, width, bias=False)
        self.t_in = nn.Linear(time_dim, width, bias=False)
        layers: list[nn.Module] = [nn.SiLU()]
        for h in hidden[1:]:
            layers += [nn.Linear(width, h), nn.SiLU()]
            width = h
        layers.append(nn.Linear(width, x_dim))
        self.rest = nn.Sequential(*layers)

    def project_condition(self, c: torch.Tensor) -> torch.Tensor:
        return self.c_in(c)

    def project_time(self, t: torch.Tensor) -> torch.Tensor:
        return self.t_in(timestep_encoding(t, self.time_dim))

    def denoise(self, x: torch.Tensor, c_proj: torch.Tensor, t_proj: torch.Tensor) -> torch.Tensor:
        return self.rest(self.x_in(x) + c_proj + t_proj)

    def forward(self, x: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.denoise(x, self.project_condition(c), self.project_time(t))


def _as_matrix(name: str, value: Any, width: int | None = None) -> torch.Tensor:
    arr = np.asarray(value.detach().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise DataError(f"{name} must be a matrix (rows, width), got shape {arr.shape}")
    if width is not None and arr.shape[1] != width:
        raise DataError(f"{name} has width {arr.shape[1]}, but the diffusion model was trained on width {width}: "
                        "the embedding sizes differ (same nonlabel_hidden[-1] and label_hidden[-1] needed)")
    if not np.isfinite(arr).all():
        raise DataError(f"{name} holds NaN or infinite values")
    return torch.from_numpy(arr)


class ConditionalDiffusion:
    """Learns ``p(x | c)`` by DDPM with the condition clamped; :meth:`sample` synthesises ``x`` given ``c``.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> c = rng.normal(size=(2000, 1)); x = 2 * c + 0.5 * rng.normal(size=(2000, 1))
    >>> model = ConditionalDiffusion(DiffusionConfig(steps=50, epochs=5)).fit(x, c)   # doctest: +SKIP
    >>> model.sample(np.full((1000, 1), 1.0)).mean()                                   # doctest: +SKIP
    2.0...
    """

    def __init__(self, config: DiffusionConfig | None = None) -> None:
        self.config = config or DiffusionConfig()
        if not isinstance(self.config, DiffusionConfig):
            raise ConfigError(f"config must be a DiffusionConfig, got {type(self.config).__name__}")

    def fit(self, x: Any, c: Any, on_epoch: Callable[[int, float], None] | None = None) -> "ConditionalDiffusion":
        """Train the denoiser on pairs ``(x_i, c_i)``; ``losses_`` holds the mean loss per epoch."""
        cfg = self.config
        x, c = _as_matrix("x (the embeddings to learn)", x), _as_matrix("c (the condition)", c)
        if len(x) != len(c):
            raise DataError(f"x has {len(x)} rows but the condition c has {len(c)}; one condition per embedding")
        if len(x) < 2:
            raise DataError(f"the diffusion model needs at least 2 aligned rows to learn from, got {len(x)}")
        self.x_mean_, self.x_std_ = x.mean(0), x.std(0).clamp_min(1e-6)
        self.c_mean_, self.c_std_ = c.mean(0), c.std(0).clamp_min(1e-6)
        xs, cs = (x - self.x_mean_) / self.x_std_, (c - self.c_mean_) / self.c_std_
        self.x_range_ = (xs.min(0).values, xs.max(0).values)  # standardised, as the sampler sees them
        self.c_range_ = (cs.min(0).values, cs.max(0).values)
        self.scheduler_ = make_scheduler(cfg)
        gen = torch.Generator().manual_seed(cfg.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.denoiser_ = Denoiser(x.shape[1], c.shape[1], cfg.hidden, cfg.time_dim)
        optimizer = torch.optim.Adam(self.denoiser_.parameters(), lr=cfg.learning_rate)
        # cosine decay: the loss is noisy in t, a falling rate settles it
        lr_sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)
        self.losses_: list[float] = []
        n = len(xs)
        for epoch in range(cfg.epochs):
            order = torch.randperm(n, generator=gen)
            total = 0.0
            for i in range(0, n, cfg.batch_size):
                rows = order[i : i + cfg.batch_size]
                x0, cond = xs[rows], cs[rows]
                t = torch.randint(0, cfg.steps, (len(rows),), generator=gen)
                eps = torch.randn(x0.shape, generator=gen)
                x_t = self.scheduler_.add_noise(x0, eps, t)  # only the h_N part is noised
                loss = torch.mean((self.denoiser_(x_t, cond, t) - eps) ** 2)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(rows)
            lr_sched.step()
            self.losses_.append(total / n)
            if on_epoch is not None:
                on_epoch(epoch, self.losses_[-1])
        return self

    def loss(self, x: Any, c: Any, seed: int = 0) -> float:
        """The simplified DDPM loss of the trained denoiser on ``(x, c)`` (t and noise drawn from ``seed``)."""
        self._check_fitted()
        x = (_as_matrix("x", x, self.denoiser_.x_dim) - self.x_mean_) / self.x_std_
        c = (_as_matrix("c", c, self.denoiser_.cond_dim) - self.c_mean_) / self.c_std_
        gen = torch.Generator().manual_seed(seed)
        t = torch.randint(0, self.config.steps, (len(x),), generator=gen)
        eps = torch.randn(x.shape, generator=gen)
        with torch.no_grad():
            return float(torch.mean((self.denoiser_(self.scheduler_.add_noise(x, eps, t), c, t) - eps) ** 2))

    def sample(self, c: Any, seed: int | None = None, chunk: int = 65_536,
               on_step: Callable[[int, torch.Tensor], None] | None = None) -> np.ndarray:
        """Synthesise one ``x`` per row of the condition ``c``: reverse DDPM from Gaussian noise over all steps.

        ``on_step(t, z)`` is called before the denoiser's call at every step with ``z = [x_t ; c]``
        (standardised; the condition part replaced): what the denoiser sees.
        """
        self._check_fitted()
        c = (_as_matrix("c (the condition)", c, self.denoiser_.cond_dim) - self.c_mean_) / self.c_std_
        if self.config.clip_sample:
            c = c.clamp(*self.c_range_)
        gen = torch.Generator().manual_seed(self.config.seed + 1 if seed is None else seed)
        out = []
        with torch.inference_mode():
            for i in range(0, len(c), chunk):
                out.append(self._reverse(c[i : i + chunk], gen, on_step))
        x = torch.cat(out) if out else torch.zeros((0, self.denoiser_.x_dim))
        return (x * self.x_std_ + self.x_mean_).numpy()

    def _reverse(self, c: torch.Tensor, gen: torch.Generator, on_step) -> torch.Tensor:
        net, scheduler = self.denoiser_, self.scheduler_
        c_proj = net.project_condition(c)  # the condition part is the same at every step (it is replaced)
        x = torch.randn((len(c), net.x_dim), generator=gen)
        for t in scheduler.timesteps:
            if on_step is not None:
                on_step(int(t), torch.cat([x, c], dim=1))
            eps = net.denoise(x, c_proj, net.project_time(t.reshape(1)))
            if self.config.clip_sample:
                eps = self._clipped_noise(x, eps, int(t))
            x = scheduler.step(eps, t, x, generator=gen).prev_sample
        return x

    def _clipped_noise(self, x: torch.Tensor, eps: torch.Tensor, t: int) -> torch.Tensor:
        """The noise that, at step ``t`` from ``x``, implies the ``x_0`` estimate clipped to the fitted range."""
        abar = self.scheduler_.alphas_cumprod[t].to(x.dtype)
        x0 = ((x - (1 - abar).sqrt() * eps) / abar.sqrt()).clamp(*self.x_range_)
        return (x - abar.sqrt() * x0) / (1 - abar).sqrt()

    def to_state(self) -> dict[str, Any]:
        """The fitted model as tensors and plain values (``torch.load(..., weights_only=True)`` reads it back)."""
        self._check_fitted()
        net = self.denoiser_
        return {"config": self.config.to_dict(), "x_dim": net.x_dim, "cond_dim": net.cond_dim,
                "denoiser": {k: v.detach().clone() for k, v in net.state_dict().items()},
                "x_mean": self.x_mean_, "x_std": self.x_std_, "c_mean": self.c_mean_, "c_std": self.c_std_,
                "x_range": self.x_range_, "c_range": self.c_range_,
                "losses": [float(v) for v in self.losses_]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ConditionalDiffusion":
        """The model :meth:`to_state` described: it samples as the fitted one did."""
        model = cls(DiffusionConfig.from_dict(state["config"]))
        cfg = model.config
        model.denoiser_ = Denoiser(int(state["x_dim"]), int(state["cond_dim"]), cfg.hidden, cfg.time_dim)
        model.denoiser_.load_state_dict(state["denoiser"])
        model.x_mean_, model.x_std_, model.c_mean_, model.c_std_ = (state[k] for k in ("x_mean", "x_std", "c_mean", "c_std"))
        for name, dim in (("x_range", "x_dim"), ("c_range", "cond_dim")):  # a state saved before ranges: unbounded
            width = int(state[dim])
            setattr(model, f"{name}_", tuple(state[name]) if name in state
                    else (torch.full((width,), -math.inf), torch.full((width,), math.inf)))
        model.scheduler_ = make_scheduler(cfg)
        model.losses_ = list(state["losses"])
        return model

    def _check_fitted(self) -> None:
        if not hasattr(self, "denoiser_"):
            raise NotFittedError("call fit before sample or loss")

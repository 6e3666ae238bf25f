"""GPT-style decoder-only language model for the torch_gpt workload.

THIS IS THE ONLY EDITABLE FILE of the workload: code patches (patches/*.patch) apply here.

Contract with train.py (frozen):
  * ``ATTENTION_IMPLS``: the names accepted by ``--attention``.
  * ``GPT(vocab_size, seq_len, layers, d_model, heads, attention, activation_checkpointing)``,
    built right after ``torch.manual_seed(seed)``; every parameter value is a function of that seed.
  * ``GPT.forward(idx, targets) -> (loss_sum, n_tokens)``: ``idx`` and ``targets`` are int64
    ``[batch, seq_len]``; ``loss_sum`` is the SUM of the per-token cross-entropy (a scalar float32
    tensor) over the ``n_tokens`` target tokens the model actually scored (an int64 scalar tensor).
    train.py normalises by the contract's token count and reports ``n_tokens`` as the work done.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

ATTENTION_IMPLS = ("naive", "baddbmm")


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads, seq_len, attention):
        super().__init__()
        assert d_model % heads == 0, "d_model must be divisible by heads"
        assert attention in ATTENTION_IMPLS, attention
        self.heads = heads
        self.head_dim = d_model // heads
        self.attention = attention
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        # causal mask: 1 where key position <= query position (float: gloo cannot broadcast bool)
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.heads, self.head_dim
        q = self.q(x).view(B, T, H, D).transpose(1, 2)  # B H T D
        k = self.k(x).view(B, T, H, D).transpose(1, 2)
        v = self.v(x).view(B, T, H, D).transpose(1, 2)
        if self.attention == "naive":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(self.mask[:T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # B H T D
        else:  # "baddbmm": pre-scaled q, additive mask fused into the score GEMM
            bias = torch.zeros(T, T, dtype=q.dtype, device=q.device)
            bias.masked_fill_(self.mask[:T, :T] == 0, float("-inf"))
            qs = (q * (1.0 / math.sqrt(D))).reshape(B * H, T, D)
            att = torch.baddbmm(bias, qs, k.reshape(B * H, T, D).transpose(1, 2))
            att = F.softmax(att, dim=-1)
            y = torch.bmm(att, v.reshape(B * H, T, D)).view(B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class NewGELU(nn.Module):
    """GELU, tanh approximation (as in GPT-2 / minGPT): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = NewGELU()
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d_model, heads, seq_len, attention):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, seq_len, attention)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, seq_len, layers, d_model, heads, attention="naive",
                 activation_checkpointing=False):
        super().__init__()
        self.seq_len = seq_len
        self.activation_checkpointing = bool(activation_checkpointing)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads, seq_len, attention) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self._init_weights(layers)

    @torch.no_grad()
    def _init_weights(self, layers):
        # GPT-2 style, in module registration order (the RNG stream order is part of the model).
        resid_std = 0.02 / math.sqrt(2 * layers)
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                std = resid_std if name.endswith(".proj") else 0.02
                m.weight.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 0.02)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.head(self.ln_f(x))
        loss_sum = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1),
                                   reduction="sum")
        n_tokens = torch.tensor(targets.numel(), dtype=torch.int64)
        return loss_sum, n_tokens

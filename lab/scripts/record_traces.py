"""Records allocation traces of PyTorch's CUDA caching allocator for a varied set of
workloads built from code (no downloaded weights), in the format of
`examples/data/trace_resnet50_train.csv.gz`: `seq,action,addr,size` with `alloc` and
`free_completed` events, plus a JSON of what PyTorch's allocator reported (peak allocated
and peak reserved bytes).

The set spans what issue 20 asks an allocator policy to hold on: MLPs, a CNN and
transformers, training and inference, a growing KV cache, batch sizes that change
between steps, and peaks from about 100 MiB to tens of GiB. The last four (a ViT under
fp16 autocast, an LSTM language model, a UNet at several resolutions, batched sampled
generation) were added after the planner and the block policy were tuned, as workloads
neither had seen; the four after them (mixture-of-experts training, an autoencoder at a
new resolution every step, variable-length BERT serving, generation from a preallocated
KV cache) after the policy was retuned for scaled traces, for the same reason.

    python3 lab/scripts/record_traces.py OUT_DIR [NAME ...]      # on the GPU machine
"""
import gzip
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda"


def mlp(width, depth, d_in, d_out):
    layers = [nn.Linear(d_in, width), nn.GELU()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, d_out))
    return nn.Sequential(*layers).to(DEV)


def train_steps(model, batches, make_batch, opt, loss_fn=F.cross_entropy):
    for b in batches:
        x, y = make_batch(b)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def w_mlp_train_small():
    """About 100 MiB: a small MLP, SGD, batch sizes changing every step."""
    m = mlp(1024, 4, 512, 10)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    sizes = [64, 256, 128, 512, 32, 384]
    train_steps(m, sizes, lambda b: (torch.randn(b, 512, device=DEV),
                                     torch.randint(0, 10, (b,), device=DEV)), opt)


def w_mlp_train_big():
    """Tens of GiB: a wide MLP with Adam (weights, gradients and two moments)."""
    m = mlp(16384, 6, 4096, 1000)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4)
    train_steps(m, [4096, 8192, 6144], lambda b: (torch.randn(b, 4096, device=DEV),
                                                  torch.randint(0, 1000, (b,), device=DEV)), opt)


class Block(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c_out)
        self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c_out)
        self.skip = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                     if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


def cnn():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for c_out, n in [(64, 2), (128, 2), (256, 2), (512, 2)]:
        for i in range(n):
            layers.append(Block(c, c_out, 2 if i == 0 and c_out != 64 else 1))
            c = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 100)]
    return nn.Sequential(*layers).to(DEV)


def w_cnn_train():
    """A ResNet-18-like CNN, SGD, 160x160 images, batch sizes 48, 96, 64."""
    m = cnn()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    train_steps(m, [48, 96, 64], lambda b: (torch.randn(b, 3, 160, 160, device=DEV),
                                            torch.randint(0, 100, (b,), device=DEV)), opt)


def w_cnn_infer_varbatch():
    """The same CNN, inference under no_grad, batch sizes drawn at random."""
    m = cnn().eval()
    rng = random.Random(7)
    with torch.no_grad():
        for _ in range(12):
            m(torch.randn(rng.choice([1, 3, 8, 17, 32, 64]), 3, 224, 224, device=DEV))
    torch.cuda.synchronize()


class Decoder(nn.Module):
    """A GPT-style decoder with an explicit KV cache that grows by concatenation."""

    def __init__(self, d, layers, heads, vocab):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                for _ in range(layers))
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, cache=None):
        x = self.emb(tokens)
        b, t, d = x.shape
        h = self.heads
        new_cache = []
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.ln1[i](x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            new_cache.append((k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
            x = x + self.out[i](a.transpose(1, 2).reshape(b, t, d))
            x = x + self.ff[i](self.ln2[i](x))
        return self.head(x), new_cache


def w_gpt_generate():
    """Generation with a growing KV cache (the held-out kind of trace): GPT-2-medium-like
    sizes, batch 4, a 64-token prompt, 192 new tokens, greedy."""
    m = Decoder(1024, 24, 16, 50257).to(DEV).eval()
    with torch.no_grad():
        tokens = torch.randint(0, 50257, (4, 64), device=DEV)
        logits, cache = m(tokens)
        for _ in range(192):
            nxt = logits[:, -1:].argmax(-1)
            logits, cache = m(nxt, cache)
    torch.cuda.synchronize()


def w_transformer_train():
    """A transformer encoder (d 1024, 12 layers), AdamW, sequence lengths and batch sizes
    that change between steps."""
    layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True)
    m = nn.TransformerEncoder(layer, 12).to(DEV)
    head = nn.Linear(1024, 1000).to(DEV)
    opt = torch.optim.AdamW(list(m.parameters()) + list(head.parameters()), lr=1e-4)
    for b, t in [(8, 512), (16, 256), (4, 1024), (12, 384)]:
        x = torch.randn(b, t, 1024, device=DEV)
        y = torch.randint(0, 1000, (b * t,), device=DEV)
        loss = F.cross_entropy(head(m(x)).reshape(b * t, 1000), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def w_transformer_train_bf16():
    """The decoder trained under bf16 autocast (mixed precision: fp32 master weights,
    bf16 activations), batch 8 x 1024 tokens, two steps."""
    m = Decoder(1536, 16, 16, 32000).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for b in [8, 6]:
        tokens = torch.randint(0, 32000, (b, 1024), device=DEV)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, _ = m(tokens)
            loss = F.cross_entropy(logits.float().reshape(-1, 32000), tokens.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def w_vit_train():
    """A ViT-B/16-like classifier (patch embedding, 12 encoder layers of d 768), AdamW,
    fp16 autocast, batch sizes 32, 64, 48 at 224x224."""
    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, 768, 16, 16)
            self.pos = nn.Parameter(torch.zeros(1, 196, 768))
            layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, 12)
            self.head = nn.Linear(768, 1000)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.enc(x).mean(1))

    m = ViT().to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for b in [32, 64, 48]:
        x = torch.randn(b, 3, 224, 224, device=DEV)
        y = torch.randint(0, 1000, (b,), device=DEV)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(m(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def w_lstm_train():
    """A 3-layer LSTM language model (hidden 2048, vocab 32000), Adam, truncated BPTT over
    sequences of 64, 128 and 96 steps, batch 32."""
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32000, 1024)
            self.rnn = nn.LSTM(1024, 2048, 3, batch_first=True)
            self.out = nn.Linear(2048, 32000)

        def forward(self, t):
            return self.out(self.rnn(self.emb(t))[0])

    m = LM().to(DEV)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4)
    for t in [64, 128, 96]:
        tokens = torch.randint(0, 32000, (32, t), device=DEV)
        loss = F.cross_entropy(m(tokens).reshape(-1, 32000), tokens.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def w_unet_infer():
    """A UNet (4 levels, skip connections, 64-512 channels), inference under no_grad at
    resolutions 256, 512, 384 and 768, batch 4."""
    def conv(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, 1, 1), nn.GroupNorm(8, c_out), nn.SiLU(),
                             nn.Conv2d(c_out, c_out, 3, 1, 1), nn.GroupNorm(8, c_out), nn.SiLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            cs = [64, 128, 256, 512]
            self.down = nn.ModuleList()
            c = 3
            for co in cs:
                self.down.append(conv(c, co))
                c = co
            self.up = nn.ModuleList(conv(cs[i] + cs[i - 1], cs[i - 1]) for i in range(len(cs) - 1, 0, -1))
            self.out = nn.Conv2d(64, 3, 1)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.down):
                x = d(x)
                if i < len(self.down) - 1:
                    skips.append(x)
                    x = F.max_pool2d(x, 2)
            for u in self.up:
                x = F.interpolate(x, scale_factor=2.0)
                x = u(torch.cat([x, skips.pop()], 1))
            return self.out(x)

    m = UNet().to(DEV).eval()
    with torch.no_grad():
        for r in [256, 512, 384, 768]:
            m(torch.randn(4, 3, r, r, device=DEV))
    torch.cuda.synchronize()


def w_gpt_generate_batched():
    """A smaller decoder (d 768, 12 layers) generating for 16 sequences at once with
    top-k sampling: prompts of 256 tokens, 96 new tokens."""
    m = Decoder(768, 12, 12, 50257).to(DEV).eval()
    g = torch.Generator(device=DEV).manual_seed(3)
    with torch.no_grad():
        tokens = torch.randint(0, 50257, (16, 256), device=DEV)
        logits, cache = m(tokens)
        for _ in range(96):
            top = torch.topk(logits[:, -1].float(), 40)
            pick = torch.multinomial(F.softmax(top.values, -1), 1, generator=g)
            logits, cache = m(top.indices.gather(1, pick), cache)
    torch.cuda.synchronize()


def w_moe_train():
    """A mixture-of-experts MLP block stack (8 experts of d 1024 -> 4096, top-2 routing),
    AdamW: every expert's batch is as large as the tokens routed to it, so sizes change
    with each step's routing. Batches of 4096, 6144 and 3072 tokens."""
    class MoE(nn.Module):
        def __init__(self, d=1024, experts=8, layers=4):
            super().__init__()
            self.gates = nn.ModuleList(nn.Linear(d, experts) for _ in range(layers))
            self.experts = nn.ModuleList(
                nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                              for _ in range(experts)) for _ in range(layers))
            self.head = nn.Linear(d, 1000)

        def forward(self, x):
            for gate, experts in zip(self.gates, self.experts):
                w, idx = torch.topk(F.softmax(gate(x), -1), 2, dim=-1)
                out = torch.zeros_like(x)
                for e, expert in enumerate(experts):
                    rows, slot = (idx == e).nonzero(as_tuple=True)
                    if rows.numel():
                        out.index_add_(0, rows, expert(x[rows]) * w[rows, slot, None])
                x = x + out
            return self.head(x)

    m = MoE().to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    train_steps(m, [4096, 6144, 3072], lambda n: (torch.randn(n, 1024, device=DEV),
                                                  torch.randint(0, 1000, (n,), device=DEV)), opt)


def w_autoencoder_train_varres():
    """A convolutional autoencoder (5 strided levels, 32-512 channels, transposed-conv
    decoder), Adam, a different image resolution and batch every step."""
    enc, dec, c = [], [], 3
    for co in [32, 64, 128, 256, 512]:
        enc += [nn.Conv2d(c, co, 4, 2, 1), nn.BatchNorm2d(co), nn.ReLU()]
        dec = [nn.ConvTranspose2d(co, c, 4, 2, 1)] + ([nn.ReLU()] if c != 3 else []) + dec
        c = co
    m = nn.Sequential(*enc, *dec).to(DEV)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4)
    def images(batch):
        b, r = batch
        x = torch.randn(b, 3, r, r, device=DEV)
        return x, x

    train_steps(m, [(32, 256), (8, 512), (64, 128), (16, 384), (24, 320)], images, opt,
                loss_fn=F.mse_loss)


def w_bert_infer_varlen():
    """A BERT-base-like encoder (d 768, 12 layers), inference under no_grad on requests
    of random batch size and sequence length, as a serving loop sees them."""
    layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
    m = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).to(DEV).eval()
    emb = nn.Embedding(30522, 768).to(DEV)
    rng = random.Random(11)
    with torch.no_grad():
        for _ in range(40):
            b, t = rng.choice([1, 2, 4, 8, 16, 32]), rng.randint(16, 512)
            m(emb(torch.randint(0, 30522, (b, t), device=DEV))).mean()
    torch.cuda.synchronize()


def w_llama_generate_static():
    """A decoder with a preallocated KV cache written in place (no growth) and rotary
    position embeddings, d 2048, 16 layers, batch 8: a 512-token prompt, 128 new tokens,
    then a second request of batch 2 reusing the cache."""
    d, layers, heads, vocab, max_t = 2048, 16, 16, 32000, 1024
    hd = d // heads
    emb = nn.Embedding(vocab, d).to(DEV).half()
    qkv = nn.ModuleList(nn.Linear(d, 3 * d, bias=False) for _ in range(layers)).to(DEV).half()
    out = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers)).to(DEV).half()
    ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.SiLU(),
                                     nn.Linear(4 * d, d, bias=False))
                       for _ in range(layers)).to(DEV).half()
    head = nn.Linear(d, vocab, bias=False).to(DEV).half()
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=DEV).float() / hd))

    def rope(x, pos):
        f = torch.outer(pos.float(), inv)
        cos, sin = f.cos().half(), f.sin().half()
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    def run(b, prompt, new):
        kc = torch.zeros(layers, b, heads, max_t, hd, device=DEV, dtype=torch.half)
        vc = torch.zeros_like(kc)
        tokens = torch.randint(0, vocab, (b, prompt), device=DEV)
        start = 0
        for step in range(new + 1):
            x = emb(tokens)
            t = x.shape[1]
            pos = torch.arange(start, start + t, device=DEV)
            for i in range(layers):
                q, k, v = qkv[i](F.layer_norm(x, (d,))).split(d, -1)
                q, k, v = (z.view(b, t, heads, hd).transpose(1, 2) for z in (q, k, v))
                q, k = rope(q, pos), rope(k, pos)
                kc[i, :, :, start:start + t] = k
                vc[i, :, :, start:start + t] = v
                a = F.scaled_dot_product_attention(q, kc[i, :, :, :start + t],
                                                   vc[i, :, :, :start + t], is_causal=step == 0)
                x = x + out[i](a.transpose(1, 2).reshape(b, t, d))
                x = x + ff[i](F.layer_norm(x, (d,)))
            tokens = head(x[:, -1:]).argmax(-1)
            start += t

    with torch.no_grad():
        run(8, 512, 128)
        run(2, 256, 64)
    torch.cuda.synchronize()


WORKLOADS = {name[2:]: f for name, f in globals().items() if name.startswith("w_")}


def record(name, fn, out_dir):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=2_000_000)
    t = time.time()
    fn()
    secs = time.time() - t
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    events = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    path = os.path.join(out_dir, f"trace_{name}.csv.gz")
    with gzip.open(path, "wt") as f:
        f.write("seq,action,addr,size\n")
        for i, e in enumerate(events):
            f.write(f"{i},{e['action']},{e['addr']},{e['size']}\n")
    keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms",
            "allocation.all.allocated", "segment.all.allocated", "inactive_split_bytes.all.peak"]
    info = {k: stats.get(k) for k in keys}
    info["events"] = len(events)
    info["what"] = fn.__doc__.strip().replace("\n   ", "").replace("  ", " ")
    info["device"] = torch.cuda.get_device_name()
    info["torch"] = torch.__version__
    with open(os.path.join(out_dir, f"trace_{name}.json"), "w") as f:
        json.dump(info, f)
    ratio = info["reserved_bytes.all.peak"] / max(1, info["allocated_bytes.all.peak"])
    print(f"{name}: {len(events)} events, peak allocated {info['allocated_bytes.all.peak'] / 2**30:.3f} GiB, "
          f"reserved/allocated {ratio:.3f}, {secs:.1f} s", flush=True)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out_dir, exist_ok=True)
    names = sys.argv[2:] or list(WORKLOADS)
    for name in names:
        try:
            record(name, WORKLOADS[name], out_dir)
        except Exception as e:  # one failing workload must not lose the others
            torch.cuda.memory._record_memory_history(enabled=None)
            print(f"{name}: FAILED: {e!r}", flush=True)


if __name__ == "__main__":
    main()

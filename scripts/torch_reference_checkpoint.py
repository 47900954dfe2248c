#!/usr/bin/env python3
"""Reference checkpoints of the issue-12 models for kiln::nn: PyTorch's default initialisation
of the MLP and the LeNet, and their logits on fixed inputs.

    python3 scripts/torch_reference_checkpoint.py OUTDIR

writes (OUTDIR is created when missing)
  OUTDIR/mlp.safetensors           the MLP's state_dict(), F32: 0.weight [256, 784], 0.bias [256],
                                   2.weight [128, 256], 2.bias, 4.weight [10, 128], 4.bias
  OUTDIR/lenet.safetensors         the LeNet's state_dict(), F32: 0.weight [6, 1, 5, 5], 0.bias,
                                   3.weight [16, 6, 5, 5], 3.bias, 7.weight [120, 256], 7.bias,
                                   9.weight [84, 120], 9.bias, 11.weight [10, 84], 11.bias
  OUTDIR/reference_io.safetensors  mlp.input [8, 784] F32, mlp.logits [8, 10] F64,
                                   lenet.input [8, 1, 28, 28] F32, lenet.logits [8, 10] F64
The models are the nn.Sequential of bench/torch_train.py, each built after
torch.manual_seed(0). The inputs are torch.randn from a CPU generator seeded with 1 (mlp.input
drawn first). The logits are the eval-mode outputs computed on the CPU in float64 from the f32
weights and inputs cast to double (exactly), so the Kiln side compares its f32 forward with a
tolerance.

This script writes the safetensors format itself: an 8-byte little-endian header length, a
JSON header (dtype, shape, data_offsets of each tensor, "__metadata__": {"format": "pt"})
padded with spaces to a multiple of 8, then the tensors' bytes, wider element types first so
every tensor is aligned, without holes. When the safetensors package is importable, every file
is read back with it and compared. Needs PyTorch (exit status 3 without it); prints one line.
"""
import copy
import ctypes
import json
import os
import struct
import sys

try:
    import torch
    from torch import nn
except ImportError as e:
    print(f"torch_reference_checkpoint.py: PyTorch is not importable ({e})")
    sys.exit(3)

DTYPES = {torch.float32: "F32", torch.float64: "F64"}
INPUT_SHAPES = {"mlp": (8, 784), "lenet": (8, 1, 28, 28)}


def build_model(name):
    """The issue-12 model `name` on the CPU, PyTorch's default initialisation after
    torch.manual_seed(0) (the same as bench/torch_train.py)."""
    torch.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def logits_f64(model, x):
    """model's eval-mode output for x, computed in float64 on a double copy of the model."""
    double = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return double(x.double())


def tensor_bytes(t):
    """The raw bytes (host order: little-endian) of a contiguous CPU copy of t."""
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def save_safetensors(path, tensors):
    """Writes tensors (name -> F32 or F64 tensor) to path in the safetensors format."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors, key=lambda k: -tensors[k].element_size()):  # stable sort
        t = tensors[name]
        data = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.writelines(blobs)


def read_back(files):
    """None when the safetensors package is missing, else whether every file loads with it
    and holds exactly its tensors."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        return None
    for path, tensors in files.items():
        back = load_file(path)
        if back.keys() != tensors.keys() or not all(
                back[k].dtype == t.dtype and torch.equal(back[k], t.detach().cpu())
                for k, t in tensors.items()):
            return False
    return True


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUTDIR")
        sys.exit(2)
    if sys.byteorder != "little":
        print("torch_reference_checkpoint.py: safetensors is little-endian; this host is not")
        sys.exit(1)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(1)
    files, io, counts = {}, {}, []
    for name, shape in INPUT_SHAPES.items():
        model = build_model(name)
        state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
        files[os.path.join(out, f"{name}.safetensors")] = state
        io[f"{name}.input"] = torch.randn(shape, generator=gen)
        io[f"{name}.logits"] = logits_f64(model, io[f"{name}.input"])
        counts.append(f"{name}.safetensors ({len(state)} tensors, "
                      f"{sum(v.numel() for v in state.values())} parameters)")
    files[os.path.join(out, "reference_io.safetensors")] = io
    for path, tensors in files.items():
        save_safetensors(path, tensors)
    verified = read_back(files)
    check = {None: "safetensors not installed, not read back",
             True: "read back identical with the safetensors package",
             False: "MISMATCH when read back with the safetensors package"}[verified]
    print(f"wrote {out}: {', '.join(counts)}, reference_io.safetensors ({len(io)} tensors); "
          f"{check}")
    if verified is False:
        sys.exit(1)


if __name__ == "__main__":
    main()

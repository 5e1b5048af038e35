"""Writer/reader round trips, the reader's rejections, and the torch interpreter against an
independent numpy implementation of the spec's formulas."""
import hashlib
import json
import os
import struct

import numpy as np
import pytest

import _reference
from cnnengine import model_format as mf


def small_graph(**over):
    """A DAG using every op, with asymmetric paddings and count_include_pad false."""
    g = {
        "format": "cnn-engine-model", "version": 1,
        "name": "every-op",
        "weights": {"file": "m.safetensors", "sha256": "0" * 64},
        "input": {"name": "img", "dtype": "uint8", "shape": [2, 9, 8],
                  "preprocess": {"scale": 0.003921568859368563, "mean": [0.5, 0.25], "std": [0.5, 2.0],
                                 "pad": [1, 0, 2, 1], "pad_value": -0.75}},
        "labels": ["a", "b", "c", "d"],
        "nodes": [
            {"name": "conv", "op": "conv2d", "inputs": ["img"],
             "attrs": {"out_channels": 3, "kernel": [3, 2], "stride": [1, 2], "padding": [0, 2, 1, 0]},
             "tensors": {"weight": "conv.w", "bias": "conv.b"}},
            {"name": "r", "op": "relu", "inputs": ["conv"]},
            {"name": "t", "op": "tanh", "inputs": ["conv"]},
            {"name": "sum", "op": "add", "inputs": ["r", "t"]},
            {"name": "mp", "op": "maxpool", "inputs": ["sum"], "attrs": {"kernel": [3, 3], "stride": [2, 1],
                                                                        "padding": [2, 0, 1, 2]}},
            {"name": "ap", "op": "avgpool", "inputs": ["mp"],
             "attrs": {"kernel": [2, 3], "padding": [1, 0, 0, 2], "count_include_pad": False}},
            {"name": "ap2", "op": "avgpool", "inputs": ["ap"],
             "attrs": {"kernel": [2, 2], "stride": [1, 1], "padding": [1, 1, 1, 1], "count_include_pad": True}},
            {"name": "sig", "op": "sigmoid", "inputs": ["ap2"]},
            {"name": "flat", "op": "flatten", "inputs": ["sig"]},
            {"name": "fc", "op": "dense", "inputs": ["flat"], "attrs": {"units": 4},
             "tensors": {"weight": "fc.w"}},
            {"name": "prob", "op": "softmax", "inputs": ["fc"]},
        ],
        "outputs": ["prob", "sum"],
    }
    g.update(over)
    return g


def small_tensors(graph, seed=0):
    shapes = mf.validate(graph, None)
    rng = np.random.default_rng(seed)
    c_in = shapes["img"][0]
    flat = shapes["flat"][0]
    return {"conv.w": rng.standard_normal((3, c_in, 3, 2)).astype(np.float32),
            "conv.b": rng.standard_normal(3).astype(np.float32),
            "fc.w": rng.standard_normal((4, flat)).astype(np.float32)}


@pytest.fixture
def written(tmp_path):
    g = small_graph()
    t = small_tensors(g)
    model = mf.write_model(tmp_path / "m.json", g, t)
    return model, g, t


def test_round_trip(written, tmp_path):
    model, g, t = written
    back = mf.read_model(tmp_path / "m.json")
    assert back.graph["weights"]["file"] == "m.safetensors"
    blob = (tmp_path / "m.safetensors").read_bytes()
    assert back.graph["weights"]["sha256"] == hashlib.sha256(blob).hexdigest()
    for k in ("name", "input", "labels", "nodes", "outputs"):
        assert back.graph[k] == g[k]
    assert back.graph["format"] == "cnn-engine-model" and back.graph["version"] == 1
    assert set(back.tensors) == set(t)
    for k in t:
        assert back.tensors[k].dtype == np.float32
        np.testing.assert_array_equal(back.tensors[k], t[k])
    # Writing what was read gives the same bytes: the writer is deterministic.
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    mf.write_model(tmp_path / "m.json", back.graph, back.tensors)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_write_leaves_no_temporaries_and_normal_permissions(written, tmp_path):
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.safetensors"]
    umask = os.umask(0)
    os.umask(umask)
    for p in tmp_path.iterdir():
        assert p.stat().st_mode & 0o777 == 0o666 & ~umask


def test_invalid_model_is_not_written(tmp_path):
    g = small_graph()
    t = small_tensors(g)
    t["extra"] = np.zeros(3, np.float32)
    with pytest.raises(mf.ModelFormatError, match="extra"):
        mf.write_model(tmp_path / "m.json", g, t)
    assert list(tmp_path.iterdir()) == []


def test_weights_file_is_standard_safetensors(written, tmp_path):
    blob = (tmp_path / "m.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    entries = sorted((v["data_offsets"], k, v) for k, v in header.items() if k != "__metadata__")
    end = 0
    for (b, e), k, v in entries:
        assert v["dtype"] == "F32" and b == end and e - b == 4 * int(np.prod(v["shape"]))
        end = e
    assert 8 + n + end == len(blob)


def rewrite(tmp_path, mutate):
    path = tmp_path / "m.json"
    g = json.loads(path.read_text())
    mutate(g)
    path.write_text(json.dumps(g))
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.update(version=2), "unsupported version"),
    (lambda g: g.update(version=True), "unsupported version"),
    (lambda g: g.update(format="onnx"), "format"),
    (lambda g: g.update(extra=1), "unknown key"),
    (lambda g: g["nodes"][0]["attrs"].update(dilation=[1, 1]), "node 'conv': attrs has unknown key"),
    (lambda g: g["nodes"][5]["attrs"].pop("count_include_pad"), "node 'ap': attrs lacks"),
    (lambda g: g["weights"].update(sha256="0" * 64), "sha256"),
    (lambda g: g["weights"].update(file="../m.safetensors"), "relative path"),
    (lambda g: g["weights"].update(file="/tmp/m.safetensors"), "relative path"),
    (lambda g: g.update(labels=["a"]), "labels has 1 entries"),
    (lambda g: g.update(outputs=["nope"]), "output 'nope'"),
    (lambda g: g.update(outputs=["prob", "prob"]), "duplicates"),
    (lambda g: g["nodes"][1].update(inputs=["sum"]), "cycle"),
    (lambda g: g["nodes"][1].update(name="conv"), "duplicate node name"),
    (lambda g: g["nodes"][1].update(name="img"), "named like the input"),
    (lambda g: g["nodes"][1].update(op="gelu"), "unknown op"),
    (lambda g: g["nodes"][3].update(inputs=["r"]), "takes 2 input"),
    (lambda g: g["nodes"][0]["attrs"].update(padding=[3, 0, 0, 0]), "smaller than the kernel"),
    (lambda g: g["nodes"][0]["attrs"].update(out_channels=4), "has shape"),
    (lambda g: g["nodes"][9]["attrs"].update(units=5), "has shape"),
    (lambda g: g["nodes"][9].update(inputs=["sig"]), "rank-1"),
    (lambda g: g["nodes"][0]["tensors"].pop("bias"), "no node uses: conv.b"),
    (lambda g: g["nodes"][0]["tensors"].update(bias="conv.w"), "already used"),
    (lambda g: g["nodes"][9]["tensors"].update(bias="fc.b"), "missing"),
    (lambda g: g["input"]["preprocess"].update(std=[1.0, 0.0]), "std entries must be positive"),
    (lambda g: g["input"]["preprocess"].update(mean=[0.0]), "mean"),
    (lambda g: g["input"].update(dtype="float32"), "preprocess must be absent"),
    (lambda g: g["input"]["preprocess"].pop("scale"), "lacks required key"),
])
def test_reader_rejects(written, tmp_path, mutate, message):
    path = rewrite(tmp_path, mutate)
    with pytest.raises(mf.ModelFormatError, match=message) as e:
        mf.read_model(path)
    assert str(path) in str(e.value)


def test_reader_rejects_duplicate_keys_and_bad_bytes(written, tmp_path):
    path = tmp_path / "m.json"
    text = path.read_text()
    path.write_text(text.replace('"name": "every-op",', '"name": "every-op", "name": "x",'))
    with pytest.raises(mf.ModelFormatError, match="duplicate key"):
        mf.read_model(path)
    path.write_bytes(b"\xff" + text.encode())
    with pytest.raises(mf.ModelFormatError, match="UTF-8"):
        mf.read_model(path)


def test_reader_rejects_non_f32_weights(written, tmp_path):
    from safetensors.numpy import save
    _, g, t = written
    t = dict(t)
    t["conv.b"] = t["conv.b"].astype(np.float64)
    blob = save(t)
    (tmp_path / "m.safetensors").write_bytes(blob)
    rewrite(tmp_path, lambda gg: gg["weights"].update(sha256=hashlib.sha256(blob).hexdigest()))
    with pytest.raises(mf.ModelFormatError, match="conv.b.*F32"):
        mf.read_model(tmp_path / "m.json")


def test_nodes_in_any_order(written, tmp_path):
    path = rewrite(tmp_path, lambda g: g.update(nodes=list(reversed(g["nodes"]))))
    model = mf.read_model(path)
    x = np.random.default_rng(1).integers(0, 256, (3, 2, 9, 8), dtype=np.uint8)
    import torch
    a = mf.to_torch(model)(torch.from_numpy(x))[0]
    b = mf.to_torch(written[0])(torch.from_numpy(x))[0]
    assert torch.equal(a, b)


def test_to_torch_matches_numpy_reference(written):
    import torch
    model = written[0]
    x = np.random.default_rng(2).integers(0, 256, (5, 2, 9, 8), dtype=np.uint8)
    ref = _reference.run(model, x)
    module = mf.to_torch(model)
    prob32, sum32 = module(torch.from_numpy(x))
    prob64, sum64 = module.to(torch.float64)(torch.from_numpy(x))
    assert prob32.dtype == torch.float32 and prob64.dtype == torch.float64
    np.testing.assert_allclose(prob64.numpy(), ref["prob"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(sum64.numpy(), ref["sum"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(prob32.numpy(), ref["prob"], rtol=0, atol=1e-5)
    values = module.forward_values(torch.from_numpy(x))
    for name, v in values.items():
        np.testing.assert_allclose(v.numpy(), ref[name], rtol=0, atol=1e-10, err_msg=name)


def test_preprocess_is_float32_arithmetic(written):
    import torch
    model = written[0]
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16).repeat(2, axis=1)[:, :, :9, :8]
    values = mf.to_torch(model).forward_values(torch.from_numpy(np.ascontiguousarray(x)))
    expect = mf.preprocess_numpy(model.graph, x)
    assert values["img"].dtype == torch.float32
    np.testing.assert_array_equal(values["img"].numpy(), expect)
    assert values["img"][0, 0, 0, 0].item() == np.float32(-0.75)  # the pad value, top-left border


def test_float32_input_model(tmp_path):
    g = {"format": "cnn-engine-model", "version": 1, "name": "mlp", "weights": {"file": "m.safetensors", "sha256": "0" * 64},
         "input": {"name": "x", "dtype": "float32", "shape": [6]},
         "nodes": [{"name": "d", "op": "dense", "inputs": ["x"], "attrs": {"units": 3},
                    "tensors": {"weight": "w", "bias": "b"}},
                   {"name": "s", "op": "sigmoid", "inputs": ["d"]}],
         "outputs": ["s"]}
    rng = np.random.default_rng(3)
    t = {"w": rng.standard_normal((3, 6)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    model = mf.read_model(mf.write_model(tmp_path / "mlp.json", g, t).path)
    import torch
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = mf.to_torch(model).double()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, _reference.run(model, x)["s"], atol=1e-12)


def test_to_torch_on_cuda_if_present(written):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device in this torch build/machine")
    model = written[0]
    x = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (5, 2, 9, 8), dtype=np.uint8))
    cpu = mf.to_torch(model)(x)[0]
    gpu = mf.to_torch(model).to("cuda")(x.to("cuda"))[0].cpu()
    assert (cpu - gpu).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name, labels", [("lenet5", [str(i) for i in range(10)]),
                                          ("lenet5-fashion", None)])
def test_committed_models(repo, name, labels):
    path = repo / "models" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not written yet (scripts/train_lenet5.py)")
    model = mf.read_model(path)
    assert model.parameter_count() == 61_706
    assert [n["name"] for n in model.graph["nodes"]] == [
        "c1", "c1_tanh", "s2", "c3", "c3_tanh", "s4", "flatten", "f5", "f5_tanh", "f6", "f6_tanh", "f7", "prob"]
    assert model.graph["outputs"] == ["prob"]
    pre = model.graph["input"]["preprocess"]
    assert pre["scale"] == float(np.float32(1 / 255)) and pre["pad"] == [2, 2, 2, 2]
    assert all(n["attrs"]["count_include_pad"] for n in model.graph["nodes"] if n["op"] == "avgpool")
    if labels:
        assert model.labels == labels
    else:
        from cnnengine.datasets import FASHION_LABELS
        assert model.labels == FASHION_LABELS
    assert (path.parent / model.graph["weights"]["file"]).stat().st_size < 300_000


@pytest.mark.parametrize("name", ["lenet5", "seed002-cnn", "seed003-mlp", "seed003-mlp-norm"])
def test_architecture_only_graphs_read_as_zero_tensors(repo, name, tmp_path):
    """The v1 amendment: no "weights" key, every named tensor zeros of its node's shape, as the C++
    loader gives them; written back, it is an ordinary full model."""
    m = mf.read_model(repo / "models" / "architectures" / f"{name}.json")
    assert not m.has_weights and m.tensors
    for node in m.graph["nodes"]:
        for role, tname in node.get("tensors", {}).items():
            t = m.tensors[tname]
            assert t.dtype == np.float32 and not t.any(), (name, tname)
            if node["op"] == "dense" and role == "weight":
                assert t.shape[0] == node["attrs"]["units"]
            if node["op"] == "conv2d" and role == "weight":
                assert t.shape[0] == node["attrs"]["out_channels"] and t.shape[2:] == tuple(node["attrs"]["kernel"])
    out = mf.write_model(tmp_path / "full.json", m.graph, m.tensors)
    back = mf.read_model(out.path)
    assert back.has_weights and set(back.tensors) == set(m.tensors)


def test_architecture_only_graph_with_a_huge_tensor_is_refused_before_allocation(repo, tmp_path):
    graph = json.loads((repo / "models" / "architectures" / "seed003-mlp.json").read_text())
    graph["nodes"][1]["attrs"]["units"] = 2**20  # 784 x 2^20 weights: over 2^28
    p = tmp_path / "huge.json"
    p.write_text(json.dumps(graph))
    with pytest.raises(mf.ModelFormatError, match=r"tensor 'fc1.weight' would hold 822083584 values, over 2\^28"):
        mf.read_model(p)

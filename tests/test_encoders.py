import pytest
import torch
from safetensors.torch import save_file

from robot_rl.agents.encoders import (
    DrQConvEncoder,
    MultiCameraEncoder,
    ResNet18Encoder,
    SpatialLearnedEmbeddings,
    make_image_encoder,
    random_shift,
)


def _images(b=2, h=32, w=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, h, w, 3), generator=g, dtype=torch.uint8)


# --------------------------------------------------------------------------- random_shift
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_shift_keeps_shape_and_dtype(dtype):
    x = _images(4, 16, 20).to(dtype)
    out = random_shift(x, pad=4)
    assert out.shape == x.shape
    assert out.dtype == dtype


def test_random_shift_pad_zero_is_identity():
    x = _images(3)
    assert torch.equal(random_shift(x, pad=0), x)


def test_single_bright_pixel_moves_at_most_pad_and_shifts_differ_across_samples():
    b, h, w, pad = 128, 24, 24, 4
    x = torch.zeros(b, h, w, 3, dtype=torch.uint8)
    x[:, 12, 12, :] = 255  # far enough from the border that padding never reaches it
    out = random_shift(x, pad=pad, generator=torch.Generator().manual_seed(0))
    disp = []
    for i in range(b):
        ys, xs = torch.nonzero(out[i, :, :, 0] == 255, as_tuple=True)
        assert len(ys) == 1, "an integer shift must keep exactly one bright pixel"
        dy, dx = int(ys[0]) - 12, int(xs[0]) - 12
        assert abs(dy) <= pad and abs(dx) <= pad
        disp.append((dy, dx))
    assert len(set(disp)) > 10, "samples must get independent shifts"
    # Over 128 samples every shift value in [-pad, pad] shows up on each axis.
    assert {d[0] for d in disp} == set(range(-pad, pad + 1))
    assert {d[1] for d in disp} == set(range(-pad, pad + 1))


def test_random_shift_is_replicate_pad_then_crop():
    b, h, w, pad = 16, 10, 12, 3
    coords = (torch.arange(h)[:, None] * w + torch.arange(w)[None, :]).float()
    x = coords[None, :, :, None].expand(b, h, w, 2).contiguous()
    out = random_shift(x, pad=pad, generator=torch.Generator().manual_seed(1))
    for i in range(b):
        centre = int(out[i, h // 2, w // 2, 0])
        dy, dx = centre // w - h // 2, centre % w - w // 2
        rows = (torch.arange(h) + dy).clamp(0, h - 1)
        cols = (torch.arange(w) + dx).clamp(0, w - 1)
        assert torch.equal(out[i, :, :, 0], coords[rows][:, cols])
        assert torch.equal(out[i, :, :, 1], out[i, :, :, 0])


def test_random_shift_of_a_strided_view_is_the_shift_of_its_copy():
    x = _images(6, 16, 20)
    view = torch.cat([x, x], dim=3)[:, :, :, ::2]  # a non-contiguous [B, H, W, 3]
    assert not view.is_contiguous()
    a = random_shift(view, pad=3, generator=torch.Generator().manual_seed(5))
    b = random_shift(view.contiguous(), pad=3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_random_shift_generator_is_reproducible():
    x = _images(8)
    a = random_shift(x, generator=torch.Generator().manual_seed(3))
    b = random_shift(x, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


# --------------------------------------------------------------------------- spatial embeddings
def test_spatial_learned_embeddings_matches_hand_einsum():
    torch.manual_seed(0)
    pool = SpatialLearnedEmbeddings(height=5, width=6, channels=4, num_features=3)
    feats = torch.randn(2, 4, 5, 6)
    out = pool(feats)
    assert out.shape == (2, 4 * 3)
    k = pool.kernel.detach()
    expected = torch.zeros(2, 4 * 3)
    for b in range(2):
        for c in range(4):
            for f in range(3):
                expected[b, c * 3 + f] = (feats[b, c] * k[:, :, c, f]).sum()
    torch.testing.assert_close(out, expected)


# --------------------------------------------------------------------------- DrQ encoder
@pytest.mark.parametrize("pooling", ["spatial", "flatten"])
def test_drq_encoder_output_shape_range_and_gradients(pooling):
    enc = DrQConvEncoder((32, 32), channels=8, out_dim=16, pooling=pooling)
    assert enc.out_dim == 16
    out = enc(_images(3))
    assert out.shape == (3, 16)
    assert out.min() >= -1 and out.max() <= 1
    out.pow(2).sum().backward()
    for conv in (enc.convnet[0], enc.convnet[6]):
        assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0


def test_drq_encoder_rejects_wrong_image_size():
    enc = DrQConvEncoder((32, 32), channels=8, out_dim=16)
    with pytest.raises(ValueError, match="32, 32, 3"):
        enc(_images(1, 32, 40))


# --------------------------------------------------------------------------- ResNet-18
TORCHVISION_KEYS = [
    "conv1.weight",
    "bn1.weight",
    "bn1.bias",
    "bn1.running_mean",
    "bn1.running_var",
    "layer1.0.conv1.weight",
    "layer1.0.bn1.weight",
    "layer1.1.conv2.weight",
    "layer1.1.bn2.running_var",
    "layer2.0.conv1.weight",
    "layer2.0.downsample.0.weight",
    "layer2.0.downsample.1.weight",
    "layer2.0.downsample.1.running_var",
    "layer3.0.downsample.0.weight",
    "layer3.1.bn1.running_mean",
    "layer4.0.downsample.1.bias",
    "layer4.1.conv2.weight",
    "layer4.1.bn2.weight",
    "layer4.1.bn2.bias",
]


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return ResNet18Encoder((32, 32), out_dim=16)


def test_resnet18_trunk_keys_match_torchvision(resnet):
    keys = set(resnet.trunk.state_dict())
    for k in TORCHVISION_KEYS:
        assert k in keys, k
    assert not any(k.startswith("fc.") for k in keys)
    assert "layer1.0.downsample.0.weight" not in keys  # layer1 has no downsample
    assert tuple(resnet.trunk.state_dict()["layer2.0.downsample.0.weight"].shape) == (128, 64, 1, 1)
    # 20 convs + 20 BNs (3 of each in downsample): 20 + 20*5 = 120 tensors, i.e. torchvision's 122 minus fc.
    assert len(keys) == 120


def test_resnet18_encoder_output(resnet):
    out = resnet(_images(2))
    assert out.shape == (2, 16)
    assert out.abs().max() <= 1


def _perturbed_state(trunk):
    g = torch.Generator().manual_seed(42)
    return {
        k: (v + torch.randn(v.shape, generator=g) if v.is_floating_point() else v).contiguous()
        for k, v in trunk.state_dict().items()
    }


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_resnet18_loads_local_weights(tmp_path, resnet, suffix):
    state = _perturbed_state(resnet.trunk)
    state["fc.weight"] = torch.zeros(1000, 512)  # torchvision checkpoints carry fc; it is ignored
    state["fc.bias"] = torch.zeros(1000)
    path = tmp_path / f"resnet18{suffix}"
    if suffix == ".pt":
        torch.save(state, path)
    else:
        save_file(state, str(path))
    enc = ResNet18Encoder((32, 32), out_dim=16, pretrained_path=str(path))
    loaded = enc.trunk.state_dict()
    for k, v in loaded.items():
        assert torch.equal(v, state[k]), k
    assert not torch.equal(loaded["conv1.weight"], resnet.trunk.state_dict()["conv1.weight"])


def test_resnet18_tolerates_missing_num_batches_tracked(tmp_path, resnet):
    """torchvision's published weights predate the num_batches_tracked buffers: every other
    tensor loads, the missing buffers keep their initial value."""
    state = {k: v + 0.5 if "running" in k else v  # saved BN statistics differ from a fresh trunk's
             for k, v in resnet.trunk.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "old_style.pth"
    torch.save(state, path)
    loaded = ResNet18Encoder((32, 32), out_dim=16, pretrained_path=path).trunk.state_dict()
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k
    tracked = [k for k in loaded if k.endswith("num_batches_tracked")]
    assert tracked and all(int(loaded[k]) == 0 for k in tracked)
    del state["bn1.running_mean"]  # any other missing tensor is still refused
    torch.save(state, path)
    with pytest.raises(ValueError, match="missing keys.*bn1.running_mean"):
        ResNet18Encoder((32, 32), out_dim=16, pretrained_path=path)


def test_resnet18_missing_file_names_path(tmp_path):
    path = tmp_path / "nope" / "resnet18.pth"
    with pytest.raises(FileNotFoundError) as err:
        ResNet18Encoder((32, 32), pretrained_path=str(path))
    msg = str(err.value)
    assert str(path) in msg
    assert "local file" in msg and "nothing is downloaded" in msg


def test_resnet18_unexpected_and_missing_keys_raise(tmp_path, resnet):
    state = dict(resnet.trunk.state_dict())
    state["head.weight"] = torch.zeros(3)
    del state["layer3.0.conv1.weight"]
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="head.weight") as err:
        ResNet18Encoder((32, 32), pretrained_path=path)
    assert "layer3.0.conv1.weight" in str(err.value)


def test_freeze_keeps_trunk_without_grad_and_bn_stats_fixed(tmp_path, resnet):
    path = tmp_path / "w.pt"
    torch.save(resnet.trunk.state_dict(), path)
    enc = ResNet18Encoder((32, 32), out_dim=16, pretrained_path=path, freeze=True)
    enc.train()
    assert enc.training and not enc.trunk.training
    assert all(not p.requires_grad for p in enc.trunk.parameters())
    before = {k: v.clone() for k, v in enc.trunk.state_dict().items()}
    out = enc(_images(4))
    out.sum().backward()
    for k, v in enc.trunk.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in enc.trunk.parameters())
    assert enc.projection[0].weight.grad is not None
    assert enc.pool.kernel.grad is not None

    # Control: without freeze, the same train-mode forward does move BN stats.
    live = ResNet18Encoder((32, 32), out_dim=16, pretrained_path=path)
    live.train()
    live(_images(4))
    assert not torch.equal(live.trunk.bn1.running_mean, before["bn1.running_mean"])


def test_freeze_without_weights_warns():
    with pytest.warns(UserWarning, match="random weights"):
        ResNet18Encoder((32, 32), freeze=True)


# --------------------------------------------------------------------------- factory + multi-camera
def test_make_image_encoder_kinds():
    assert isinstance(make_image_encoder("drq", (32, 32), out_dim=8), DrQConvEncoder)
    with pytest.raises(ValueError, match="drq.*resnet18"):
        make_image_encoder("vit", (32, 32))
    with pytest.raises(ValueError, match="pretrained_path"):
        make_image_encoder("drq", (32, 32), pretrained_path="w.pt")


def test_multi_camera_encoder_concatenates_one_encoder_per_camera():
    enc = MultiCameraEncoder(["front", "wrist"], (32, 32), kind="drq", out_dim=8)
    assert enc.out_dim == 8 * 2
    obs = {"front": _images(3), "wrist": _images(3, seed=1)}
    out = enc(obs)
    assert out.shape == (3, 16)
    torch.testing.assert_close(out[:, :8], enc.encoders["front"](obs["front"]))  # cameras in the given order
    torch.testing.assert_close(out[:, 8:], enc.encoders["wrist"](obs["wrist"]))
    same = {"front": obs["front"], "wrist": obs["front"]}
    assert not torch.equal(enc(same)[:, :8], enc(same)[:, 8:])  # separate weights per camera


@pytest.mark.parametrize("cameras,match", [([], "at least one camera"), (["front", "front"], "duplicate"),
                                           (["state"], "invalid camera name"), (["a.b"], "invalid camera name")])
def test_multi_camera_encoder_refuses_bad_camera_lists(cameras, match):
    with pytest.raises(ValueError, match=match):
        MultiCameraEncoder(cameras, (32, 32))


def test_the_frozen_head_reads_float16_channels_last_features_as_their_float32_values():
    """The pooling converts the cached float16 feature maps in its one layout copy: the same
    output as float32 features of the same values."""
    from robot_rl.agents.encoders import FeatureHead

    torch.manual_seed(0)
    head = FeatureHead((5, 5, 32), out_dim=16)
    half = torch.randn(3, 5, 5, 32).half()
    torch.testing.assert_close(head(half), head(half.float()), rtol=0, atol=0)
    pooled = head.pool(half.float().permute(0, 3, 1, 2))
    expected = torch.einsum("bchw,hwcf->bcf", half.float().permute(0, 3, 1, 2), head.pool.kernel).reshape(3, -1)
    torch.testing.assert_close(pooled, expected)

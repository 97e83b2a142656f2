"""Initialisers, distributions and the actor-critic against references."""

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from fusedrl.distributions import Categorical, DiagGaussian
from fusedrl.initializers import orthogonal
from fusedrl.networks import ActorCritic, Dense, param_count


@pytest.mark.parametrize(
    "shape, column_axis",
    [((4, 64), -1), ((64, 64), -1), ((64, 2), -1), ((400, 256), -1), ((64, 1), -1), ((3, 5, 8), -1),
     ((8, 4), 0), ((3, 5, 8), 0), ((3, 5, 8), 1), ((4, 6), -2)],
)
def test_orthogonal_matches_jax_reference(shape, column_axis):
    key = jax.random.key(7)
    ours = orthogonal(np.sqrt(2), column_axis=column_axis)(key, shape)
    ref = jax.nn.initializers.orthogonal(np.sqrt(2), column_axis=column_axis)(key, shape)
    assert ours.shape == shape
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=2e-6)


def test_orthogonal_under_vmap_has_no_lapack_call():
    # The batched QR of the reference initialiser is a LAPACK custom call, which has deadlocked
    # XLA's CPU thread pool on 2 cores; ours must lower to plain ops even when vmapped.
    keys = jax.random.split(jax.random.key(0), 8)
    ours = jax.jit(jax.vmap(lambda k: orthogonal()(k, (64, 64)))).lower(keys).compile().as_text()
    ref = jax.jit(jax.vmap(lambda k: jax.nn.initializers.orthogonal()(k, (64, 64))))
    assert "custom-call" in ref.lower(keys).compile().as_text()  # the check can see one
    assert "custom-call" not in ours


def test_actor_critic_init_under_vmap_has_no_custom_call():
    net = ActorCritic(action_dim=2, discrete=True)
    keys = jax.random.split(jax.random.key(0), 8)
    hlo = jax.jit(jax.vmap(lambda k: net.init(k, jnp.zeros((1, 4))))).lower(keys).compile().as_text()
    assert "custom-call" not in hlo


def test_applying_dense_does_not_run_its_initialisers():
    # flax's `self.param` traces the initialiser again at every apply to check the stored shape;
    # Dense checks the shape itself, so a training program traces no initialiser.
    calls = []

    def counting(key, shape, dtype=jnp.float32):
        calls.append(shape)
        return jnp.zeros(shape, dtype)

    layer = Dense(3, kernel_init=counting, bias_init=counting)
    params = layer.init(jax.random.key(0), jnp.ones((2, 4)))
    assert len(calls) == 2
    jax.jit(layer.apply)(params, jnp.ones((2, 4)))
    assert len(calls) == 2
    with pytest.raises(flax.errors.ScopeParamShapeError, match=r"shape \(5, 3\).*shape \(4, 3\)"):
        layer.apply(params, jnp.ones((2, 5)))  # a stored kernel of another input width
    # Boxed parameters (flax's partitioning metadata) are unboxed as flax's own `param` does.
    boxed = Dense(3, kernel_init=nn.with_partitioning(nn.initializers.ones, (None, "model")))
    params = boxed.init(jax.random.key(0), jnp.ones((2, 4)))
    np.testing.assert_array_equal(boxed.apply(params, jnp.ones((2, 4))), np.full((2, 3), 4.0))


def test_categorical_against_numpy():
    logits = jax.random.normal(jax.random.key(1), (5, 4))
    d = Categorical(logits)
    p = special.softmax(np.asarray(logits, np.float64), axis=-1)
    actions = jnp.array([0, 3, 1, 2, 3])
    np.testing.assert_allclose(d.log_prob(actions), np.log(p[np.arange(5), actions]), rtol=1e-5)
    np.testing.assert_allclose(d.entropy(), stats.entropy(p, axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(d.mode(), p.argmax(-1))
    samples = Categorical(logits[:1].repeat(20000, 0)).sample(jax.random.key(2))
    freq = np.bincount(np.asarray(samples), minlength=4) / 20000
    np.testing.assert_allclose(freq, p[0], atol=0.015)


def test_categorical_with_masked_actions():
    """An action masked as the docstring says (logit finfo.min) has probability 0: finite entropy
    and gradients, equal to those of the distribution without it."""
    m = jnp.finfo(jnp.float32).min
    logits = jnp.array([[0.3, -1.2, m, 2.0], [m, 0.0, m, m]])
    d = Categorical(logits)
    np.testing.assert_allclose(d.entropy(), [stats.entropy(special.softmax([0.3, -1.2, 2.0])), 0.0],
                               rtol=1e-6, atol=1e-7)
    grad = jax.grad(lambda x: Categorical(x).entropy().sum())(logits)
    kept = jax.grad(lambda x: Categorical(x).entropy())(jnp.array([0.3, -1.2, 2.0]))
    np.testing.assert_allclose(grad[0], [kept[0], kept[1], 0.0, kept[2]], rtol=1e-6)
    np.testing.assert_array_equal(grad[1], np.zeros(4))
    np.testing.assert_array_equal(d.mode(), [3, 1])
    np.testing.assert_allclose(d.log_prob(jnp.array([3, 1])),
                               [np.log(special.softmax([0.3, -1.2, 2.0])[2]), 0.0], rtol=1e-6)
    samples = Categorical(jnp.tile(logits[:1], (2000, 1))).sample(jax.random.key(3))
    assert not np.any(np.asarray(samples) == 2)


@pytest.mark.parametrize("log_std", [[-0.5, 0.0, 0.7], np.linspace(-1.0, 1.0, 18).reshape(6, 3)],
                         ids=["state-independent", "per-row"])
def test_diag_gaussian_against_scipy(log_std):
    # One log-prob and one entropy per row, whether the log-std is [D] or [N, D].
    mean = jax.random.normal(jax.random.key(3), (6, 3))
    log_std = jnp.asarray(log_std, jnp.float32)
    d = DiagGaussian(mean, log_std)
    a = jax.random.normal(jax.random.key(4), (6, 3))
    std = np.broadcast_to(np.exp(np.asarray(log_std, np.float64)), mean.shape)
    want = stats.norm.logpdf(np.asarray(a, np.float64), np.asarray(mean, np.float64), std).sum(-1)
    assert d.log_prob(a).shape == d.entropy().shape == (6,)
    np.testing.assert_allclose(d.log_prob(a), want, rtol=1e-5)
    np.testing.assert_allclose(d.entropy(), stats.norm.entropy(0, std).sum(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(d.mode(), mean)
    z = jax.random.normal(jax.random.key(6), (6, 3))  # a sample is the mean plus std times the noise
    np.testing.assert_allclose(d.sample_from_noise(z), np.asarray(mean) + std * np.asarray(z), rtol=1e-5,
                               atol=1e-6)
    centre = jnp.array([1.0, -2.0, 0.5])  # samples are centred on the mean and spread by std
    last = jnp.broadcast_to(log_std, (6, 3))[-1]  # the last row's log-std, [D]
    s = DiagGaussian(jnp.broadcast_to(centre, (50000, 3)), last).sample(jax.random.key(5))
    np.testing.assert_allclose(np.asarray(s).mean(0), centre, atol=0.03)
    np.testing.assert_allclose(np.asarray(s).std(0), std[-1], rtol=0.02)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_actor_critic_is_the_mlp_of_its_parameters(activation):
    # The forward pass recomputed in float64 from the parameters (random biases, so a dropped bias
    # shows): each torso is Dense-activation per hidden layer, then a linear head.
    net = ActorCritic(action_dim=2, discrete=False, hidden_sizes=(8, 8), activation=activation)
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros((1, 3)))
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    moved = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    params = jax.tree.unflatten(treedef, moved)
    obs = np.asarray(jax.random.normal(jax.random.key(2), (5, 3)), np.float64)
    act = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}[activation]
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params["params"])

    def torso(prefix):
        x = obs
        for i in range(2):
            x = act(x @ p[f"{prefix}_{i}"]["kernel"] + p[f"{prefix}_{i}"]["bias"])
        return x @ p[f"{prefix}_head"]["kernel"] + p[f"{prefix}_head"]["bias"]

    pi, v = net.apply(params, jnp.asarray(obs, jnp.float32))
    np.testing.assert_allclose(pi.mean, torso("actor"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pi.log_std, p["log_std"], rtol=1e-6)
    np.testing.assert_allclose(v, torso("critic")[:, 0], rtol=1e-4, atol=1e-5)
    torsos, heads = 2 * (3 * 8 + 8 + 8 * 8 + 8), (8 * 2 + 2) + 2 + (8 + 1)  # actor head, log-std, critic head
    assert param_count(params) == sum(x.size for x in leaves) == torsos + heads


def test_actor_critic_shapes():
    key = jax.random.key(0)
    disc = ActorCritic(action_dim=3, discrete=True, hidden_sizes=(32,))
    params = jax.jit(disc.init)(key, jnp.zeros((1, 5)))  # jitted: one compile, not one per op
    pi, v = disc.apply(params, jnp.ones((7, 5)))
    assert pi.logits.shape == (7, 3) and v.shape == (7,)
    cont = ActorCritic(action_dim=2, discrete=False, activation="relu")
    params = jax.jit(cont.init)(key, jnp.zeros((1, 5)))
    pi, v = cont.apply(params, jnp.ones((7, 5)))
    assert pi.mean.shape == (7, 2) and pi.log_std.shape == (2,) and v.shape == (7,)
    np.testing.assert_array_equal(params["params"]["log_std"], 0.0)
    narrow = ActorCritic(action_dim=2, discrete=False, log_std_init=-0.5)
    np.testing.assert_array_equal(jax.jit(narrow.init)(key, jnp.zeros((1, 5)))["params"]["log_std"], -0.5)


def test_actor_critic_init_and_separate_torsos():
    # Orthogonal init with the usual PPO scales: sqrt(2) for hidden layers, 0.01 for the policy
    # head (near-uniform initial policy), 1 for the value head; an orthogonal matrix times a scale
    # has every singular value equal to that scale. The critic reads the observation, not the
    # actor's features.
    net = ActorCritic(action_dim=2, discrete=True, hidden_sizes=(64, 64))
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros((1, 4)))["params"]
    scales = {"actor_0": np.sqrt(2), "actor_1": np.sqrt(2), "actor_head": 0.01,
              "critic_0": np.sqrt(2), "critic_1": np.sqrt(2), "critic_head": 1.0}
    for name, scale in scales.items():
        kernel = np.asarray(params[name]["kernel"], np.float64)
        np.testing.assert_allclose(np.linalg.svd(kernel, compute_uv=False), scale, rtol=1e-5, err_msg=name)
        np.testing.assert_array_equal(params[name]["bias"], 0.0)
    assert params["critic_0"]["kernel"].shape == (4, 64) and params["critic_head"]["kernel"].shape == (64, 1)
    # The value does not move when only the actor's weights change.
    obs = jax.random.normal(jax.random.key(1), (5, 4))
    _, v = net.apply({"params": params}, obs)
    moved = {**params, "actor_0": {**params["actor_0"], "kernel": params["actor_0"]["kernel"] * 3.0}}
    pi, v_moved = net.apply({"params": moved}, obs)
    np.testing.assert_array_equal(v_moved, v)
    assert not np.allclose(pi.logits, net.apply({"params": params}, obs)[0].logits)


def test_dense_is_flax_dense():
    x = jax.random.normal(jax.random.key(2), (7, 5))
    init = nn.initializers.lecun_normal()
    ours, ref = Dense(3, kernel_init=init), nn.Dense(3, kernel_init=init)
    p_ours, p_ref = ours.init(jax.random.key(3), x), ref.init(jax.random.key(3), x)
    assert jax.tree.structure(p_ours) == jax.tree.structure(p_ref)
    for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(ours.apply(p_ours, x)), np.asarray(ref.apply(p_ref, x)),
                               rtol=1e-6)


@pytest.mark.parametrize("shape", [(), (5,)])
def test_orthogonal_needs_rank_two(shape):
    with pytest.raises(ValueError, match="rank >= 2"):
        orthogonal()(jax.random.key(0), shape)


@pytest.mark.parametrize("shape", [(256, 256), (64, 400)])
def test_orthogonal_is_orthonormal_to_float32_precision(shape):
    w = np.asarray(orthogonal()(jax.random.key(1), shape), np.float64)
    gram = w @ w.T if shape[0] < shape[1] else w.T @ w
    np.testing.assert_allclose(gram, np.eye(min(shape)), atol=2e-6)


def test_bfloat16_compute_keeps_float32_parameters_and_outputs():
    # Mixed precision: the layers compute in bfloat16, parameters and their gradients stay float32,
    # and the heads come back as float32 (log-probabilities and losses in full precision).
    obs = jax.random.normal(jax.random.key(0), (8, 5))
    nets = {d: ActorCritic(action_dim=3, discrete=True, compute_dtype=d) for d in ("float32", "bfloat16")}
    params = nets["float32"].init(jax.random.key(1), obs)
    pi16, v16 = nets["bfloat16"].apply(params, obs)
    pi32, v32 = nets["float32"].apply(params, obs)
    assert pi16.logits.dtype == v16.dtype == jnp.float32
    assert "bf16" in str(jax.make_jaxpr(lambda p: nets["bfloat16"].apply(p, obs))(params))
    assert not np.array_equal(np.asarray(v16), np.asarray(v32))  # computed in bfloat16 ...
    np.testing.assert_allclose(np.asarray(v16), np.asarray(v32), rtol=0.05, atol=0.05)  # ... to its precision
    grads = jax.grad(lambda p: nets["bfloat16"].apply(p, obs)[1].sum())(params)
    assert {x.dtype for x in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}

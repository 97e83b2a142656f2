"""A network factory that cannot take make_train's keyword arguments (action_dim, discrete, obs_shape,
config) is refused with an error naming the network and the signature to write: it was Python's bare
"f() got an unexpected keyword argument 'config'", which names neither."""

from __future__ import annotations

import pytest

import fusedrl


@pytest.fixture
def factories(net_module):
    net_module("factory_nets", """
        def no_config(action_dim, discrete, obs_shape):
            return Net(action_dim)

        def positional_only(action_dim, discrete, obs_shape, config, /):
            return Net(action_dim)

        def kwargs_only(**kw):
            return Net(kw["action_dim"])

        def inner_type_error(action_dim, discrete, obs_shape, config):
            return Net(action_dim, "extra")  # the factory's own mistake: its own error
        """)


def _config(network):
    return fusedrl.PPOConfig(env_id="CartPole-v1", network=network, num_envs=4, num_steps=8,
                             total_timesteps=64)


@pytest.mark.parametrize("name", ["no_config", "positional_only"])
def test_a_factory_with_the_wrong_signature_is_named_with_the_fix(factories, name):
    with pytest.raises(TypeError, match=rf"network 'factory_nets:{name}': {name} must take the keyword "
                                        rf"arguments action_dim, discrete, obs_shape and config, e\.g\. "
                                        rf"def {name}\(action_dim, discrete, obs_shape, config\)"):
        fusedrl.make_train(_config(f"factory_nets:{name}"))


def test_a_factory_taking_kwargs_is_accepted_and_its_own_errors_are_its_own(factories):
    assert fusedrl.make_train(_config("factory_nets:kwargs_only")).network.action_dim == 2
    with pytest.raises(TypeError) as excinfo:
        fusedrl.make_train(_config("factory_nets:inner_type_error"))
    assert "must take the keyword arguments" not in str(excinfo.value)

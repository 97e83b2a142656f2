"""`register` with an env instance (or a class name) instead of the class says what to pass."""

from __future__ import annotations

import re

import pytest

import fusedrl


def test_registering_an_instance_says_to_register_the_class():
    with pytest.raises(TypeError, match=re.escape(
            "must be callable, got CartPole: register the class, not an instance: "
            "fusedrl.register('Mine-v0', CartPole)")):
        fusedrl.register("Mine-v0", fusedrl.envs.CartPole())


def test_registering_a_name_says_to_register_the_class():
    with pytest.raises(TypeError, match=re.escape("not its name 'mymod.MyEnv'")):
        fusedrl.register("Mine-v0", "mymod.MyEnv")


def test_registering_anything_else_says_what_a_factory_is():
    with pytest.raises(TypeError, match=re.escape("must be callable, got int: register the env's class "
                                                  "(or a function with no arguments that builds the env)")):
        fusedrl.register("Mine-v0", 42)

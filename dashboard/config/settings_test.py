"""Test settings: the environment-driven settings with fast password hashing and no static manifest."""

from config.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

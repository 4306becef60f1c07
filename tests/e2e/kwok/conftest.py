"""The KWOK cluster fixtures (tests/support/kwok.py) for the tests of this folder."""

from tests.support.kwok import kwok_cluster, kwok_namespace  # noqa: F401

from tenure.backends.factory import available_kinds
from tests.conftest import required_backends


def test_every_backend_ci_requires__exists_in_this_tenure():
    """A backend required by CI but missing here is a failure, not a silent skip."""
    missing = required_backends() - set(available_kinds())
    assert not missing, f"TENURE_REQUIRE_BACKENDS names backends this tenure lacks: {missing}"

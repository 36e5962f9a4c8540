from tenure.backends.factory import available_kinds
from tests.conftest import VARIANTS, required_backends


def test_every_backend_ci_requires__exists_in_this_tenure():
    """A backend required by CI but missing here is a failure, not a silent skip."""
    kinds = set(available_kinds())
    missing = required_backends() - kinds - {v for v, kind in VARIANTS.items() if kind in kinds}
    assert not missing, f"TENURE_REQUIRE_BACKENDS names backends this tenure lacks: {missing}"

"""Request, token and concurrency limits per subject, in-process or shared through Redis."""

from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.errors import QuotaError, QuotaExceededError, QuotaUnavailableError
from gateway.quota.quota_lease import QuotaLease
from gateway.quota.quotas import Quotas

__all__ = [
    "QuotaConfig",
    "QuotaError",
    "QuotaExceededError",
    "QuotaLease",
    "QuotaLimits",
    "QuotaUnavailableError",
    "Quotas",
]

"""Role-based access to models and to the control plane: casbin's model, answered from a table."""

from policies.authorizer import Authorizer, default_policy
from policies.config import AccessConfig
from policies.decision_table import DecisionTable
from policies.errors import (
    InvalidPolicyError,
    PolicyConflictError,
    PolicyError,
    PolicyForbiddenError,
    PolicyNotFoundError,
    PolicyTamperedError,
    PolicyUnavailableError,
)
from policies.policy import (
    ALL_DOMAINS,
    CONTROL_ACTIONS,
    CONTROL_RESOURCE,
    INFERENCE_ACTIONS,
    Assignment,
    Grant,
    Policy,
    user_member,
)
from policies.policy_change import PolicyChange, apply_changes
from policies.policy_store import PolicyStore

__all__ = [
    "ALL_DOMAINS",
    "CONTROL_ACTIONS",
    "CONTROL_RESOURCE",
    "INFERENCE_ACTIONS",
    "AccessConfig",
    "Assignment",
    "Authorizer",
    "DecisionTable",
    "Grant",
    "InvalidPolicyError",
    "Policy",
    "PolicyChange",
    "PolicyConflictError",
    "PolicyError",
    "PolicyForbiddenError",
    "PolicyNotFoundError",
    "PolicyStore",
    "PolicyTamperedError",
    "PolicyUnavailableError",
    "apply_changes",
    "default_policy",
    "user_member",
]

"""Errors the engine raises. Each carries a stable ``code`` the gateway maps to HTTP."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every engine error."""

    code = "engine_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequestError(EngineError):
    """The request cannot be served as asked (bad parameter, prompt too long, ...)."""

    code = "invalid_request"


class PromptTooLongError(InvalidRequestError):
    code = "context_length_exceeded"


class UnknownModelError(EngineError):
    code = "model_not_found"


class ModelLoadError(EngineError):
    """A model directory could not be loaded; the message names the file and the reason."""

    code = "model_load_failed"


class UnsupportedArchitectureError(ModelLoadError):
    code = "unsupported_architecture"


class EngineOverloadedError(EngineError):
    code = "engine_overloaded"


class EngineUnavailableError(EngineError):
    """The engine process is not reachable or has shut down."""

    code = "engine_unavailable"


class EngineRankError(EngineUnavailableError):
    """A tensor-parallel rank died or stopped answering; the instance cannot go on and must restart."""

    code = "engine_rank_failed"


class EngineConfigError(EngineError):
    """The engine configuration is inconsistent; raised at construction, before anything loads."""

    code = "engine_config_invalid"


class RequestAbortedError(EngineError):
    """A request id is unknown or was already aborted."""

    code = "request_aborted"


class UnsupportedQuantizationError(ModelLoadError):
    """A checkpoint's quantization scheme (or a requested one) is not one the engine runs."""

    code = "unsupported_quantization"

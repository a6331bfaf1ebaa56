"""Domain errors. Each base class maps to one HTTP status in app.py; ``code`` is stable."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error a client may see; ``status`` is the HTTP status it maps to."""

    status = 500
    code = "internal_error"
    # "default" on a second label for a prediction labelled by its model's default label
    labelled_by: str | None = None

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidInput(ServiceError):
    """The request is well-formed JSON but its content is not accepted."""

    status = 422
    code = "invalid_input"


class TooLarge(ServiceError):
    """The request exceeds a configured limit; the message names it."""

    status = 413
    code = "too_large"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class Unavailable(ServiceError):
    """The store cannot be reached or the model is too busy right now; retry later."""

    status = 503
    code = "unavailable"
    retry_after_s = 1


class ModelBusy(Unavailable):
    """The model kept changing, or stayed held, under every attempt; retry shortly."""

    code = "model_busy"


class OutcomeUnknown(ServiceError):
    """A handed-over learn request whose fate cannot be told: it may have been learned. No
    Retry-After: sending it again could learn it twice."""

    status = 503
    code = "learn_outcome_unknown"


STORE_UNAVAILABLE = "store_unavailable"  # the code of a store that does not answer


def store_unavailable() -> Unavailable:
    """Redis did not answer (down, or slow past its timeout): the request may be sent again."""
    return Unavailable("The model store is not answering; retry shortly.", code=STORE_UNAVAILABLE)


def learn_outcome_unknown(name: str, cause: Exception) -> OutcomeUnknown:
    """The examples of a /learn whose commit was sent and whose reply was lost."""
    return OutcomeUnknown(
        f"The store did not answer the commit of model {name!r}'s examples "
        f"({type(cause).__name__}) after it was sent: they may have been learned. Check the "
        "model's version and counters before sending them again."
    )


class ModelStateLost(Unavailable):
    """The model's configuration is in the store but its weights are not all there.

    Never served: the weights a worker could rebuild would not be the model's.
    """

    code = "model_state_lost"

    def __init__(self, name: str, what: str) -> None:
        super().__init__(
            f"Model {name!r} cannot be served: {what} (a key was evicted or deleted outside "
            f"the service). Import an export of it (POST /models/{name}/import), reset it or "
            "delete it."
        )


class TooManyPending(ServiceError):
    """The model holds as many pending predictions as it may; they lapse with time."""

    status = 429
    code = "too_many_pending"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"Model {name!r} does not exist; create it with PUT /models/{name}.")


class PredictionNotFound(NotFound):
    code = "prediction_not_found"

    def __init__(self) -> None:
        super().__init__(
            "Unknown prediction_id: feedback is accepted for a prediction this service made, "
            "within the model's feedback_ttl_s."
        )


class PredictionExpired(ServiceError):
    """A label that came after its prediction's wait ran out: its id tells when it was made."""

    status = 410
    code = "prediction_expired"

    def __init__(self, late_s: float, ttl_s: int) -> None:
        super().__init__(
            f"This label came {late_s:.1f} s after its prediction's wait of {ttl_s} s "
            "(the model's feedback_ttl_s) ran out: the prediction no longer takes a label."
        )


class StaleModel(Exception):
    """The model was deleted and created again since this worker read its configuration."""


class NotWriter(ModelBusy):
    """A commit as the model's writer, refused: another worker holds its lease now, or none
    does (it lapsed). Nothing was written; the worker hands its examples over instead."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Model {name!r}'s writer changed; retry shortly.")

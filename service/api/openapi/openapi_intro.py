"""The OpenAPI document's introduction and the description of each group of routes (tag):
what /docs and /redoc show above the operations. The routes' own docstrings describe each one.
"""

from __future__ import annotations

from typing import Any

DESCRIPTION = """\
An online-learning perceptron over HTTP. A client sends a feature vector and gets a
prediction at once; later it sends the true label, and the service counts the mistake and
updates the weights. The weights live in Redis, so every worker and replica serves and trains
the same model: no update is lost, and every worker predicts with the latest weights.

## Predict, then feedback

1. `PUT /models/{name}` creates a model: its classes, dense (`n_features`) or named features,
   and the perceptron's options, fixed at creation. A model named `default` (binary, classes
   `-1` and `1`, named features) exists from start-up.
2. `POST /predict` answers the predicted `label` (with `score`, or `scores` per class) and a
   `prediction_id`.
3. `POST /feedback` sends the true label for that `prediction_id`, within the model's
   `feedback_ttl_s`: the service counts the mistake and applies the perceptron's update to the
   scores the prediction was made with. Feedback is exactly-once: the same feedback again
   answers `"duplicate": true` and changes nothing.

`POST /learn` predicts and learns one labelled example in one step; the `/batch` routes take
many examples in one request (a dense model's examples may come packed as base64 float64:
`packed_features`). `GET /models/{name}/metrics` shows how a model learns: mistake rates, the
learning curve, the confusion matrix (the page `/dashboard` draws them).

## API keys

Where keys are on, every operation here but `/healthz` and `/readyz` needs one, sent as
`Authorization: Bearer <key>` (or `X-API-Key: <key>`). A key has a role: `predict` (predict,
read models, weights and metrics), `train` (also feedback and learn) or `admin` (also create,
delete, reset, export and import models), and may be limited to some models. No key or an
unknown one answers 401 `unauthorized`; a key without the role or the model, 403 `forbidden`.

## Errors

Every error answers JSON `{"detail": "...", "code": "..."}`: `detail` says what was wrong and
what is accepted, `code` is stable, for programs (`model_not_found`, `unknown_label`,
`validation_error`, ...). 429 and 503 answers carry `Retry-After` (all but `learn_outcome_unknown`,
which a repeat could learn twice). A 503 on a write may have been applied: feedback may be sent
again (if the first was applied, the repeat answers
`"duplicate": true` and counts once).
"""

TAGS: list[dict[str, Any]] = [
    {
        "name": "learning",
        "description": "Predict now and send the true label later (`/feedback`, exactly once), "
        "or learn a labelled example at once (`/learn`); one example per request, or many "
        "(`/batch`, answered in order). Needs a key of role `predict` to predict, `train` to "
        "send labels.",
    },
    {
        "name": "models",
        "description": "Create, list, read, reset and delete models; read their weights and "
        "learning metrics; export a model to a file and import it elsewhere. A model's "
        "configuration is fixed at creation. Reading needs a key of role `predict`, the rest "
        "`admin`.",
    },
    {
        "name": "metrics",
        "description": "The Prometheus text format: every model's figures and every route's "
        "request counts and latency histograms, summed over the workers.",
    },
    {
        "name": "health",
        "description": "For load balancers and orchestrators, no key needed: `/healthz` "
        "answers while the process is alive, `/readyz` while the store answers, holds every "
        "model whole and has memory left to learn (else 503, saying why).",
    },
]

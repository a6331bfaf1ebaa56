"""Example bodies of the OpenAPI document: what /docs and /redoc show for each request and
answer, instead of placeholders (a model's history has its own: ``openapi_history_examples.py``).

They are answers the service gave (a three-class dense model ``iris`` and the binary
``default``), rounded; ``tests/test_docs.py`` checks that each one validates against the schema
it illustrates, and that every schema a route takes or answers has one.
"""

from __future__ import annotations

from typing import Any

PREDICTION_ID = "iris:AaIOLZ1JUVg5tC3CF3rIuU0Z"
CONFIG: dict[str, Any] = {
    "classes": ["setosa", "versicolor", "virginica"],
    "multiclass": "multiclass",
    "n_features": 4,
    "hash_bits": 18,
    "fit_bias": True,
    "learning_rate": 1.0,
    "margin": 0.0,
    "averaged": False,
    "feedback_ttl_s": 86400,
}
COUNTERS: dict[str, int] = {
    "predictions": 3,
    "feedback": 1,
    "learned": 6,
    "mistakes": 6,
    "updates": 6,
    "duplicates": 1,
    "conflicts": 0,
    "unknown_feedback": 0,
    "expired": 0,
    "seen": 7,
}
MODEL_INFO: dict[str, Any] = {
    "name": "iris",
    "config": CONFIG,
    "version": 6,
    "created": 1795534158,
    "counters": COUNTERS,
}
PREDICTION: dict[str, Any] = {
    "prediction_id": PREDICTION_ID,
    "label": "virginica",
    "score": None,
    "scores": {"setosa": -30.32, "versicolor": -1.68, "virginica": 32.0},
    "probabilities": None,
    "version": 5,
}
BINARY_PREDICTION: dict[str, Any] = {
    "prediction_id": "default:AaIOLaExkunFY0jUFpXnb-Kb",
    "label": -1,
    "score": 0.0,
    "scores": None,
    "probabilities": None,
    "version": 0,
}
FEEDBACK: dict[str, Any] = {"mistake": True, "updated": True, "version": 6, "duplicate": False}
ERROR: dict[str, Any] = {
    "detail": "Model 'iris' does not exist; create it with PUT /models/iris.",
    "code": "model_not_found",
}
# One error answer per status, for the routes' documented errors (``schemas.error_responses``).
ERRORS: dict[int, dict[str, str]] = {
    400: {
        "detail": "The request body is not valid JSON (expecting value at character 10): send "
        "a JSON object; the fields are model, features.",
        "code": "malformed_json",
    },
    401: {
        "detail": "An API key is needed: send 'Authorization: Bearer <key>'.",
        "code": "unauthorized",
    },
    403: {"detail": "This key is not allowed to use model 'iris'.", "code": "forbidden"},
    404: ERROR,
    409: {
        "detail": "Model 'iris' exists with another configuration; delete it first or use "
        "another name.",
        "code": "model_exists",
    },
    410: {
        "detail": "This label came 3512.4 s after its prediction's wait of 86400 s (the "
        "model's feedback_ttl_s) ran out: the prediction no longer takes a label.",
        "code": "prediction_expired",
    },
    413: {
        "detail": "A batch holds at most 1000 examples (PERCEPTRON_MAX_BATCH); got 1001.",
        "code": "batch_too_large",
    },
    422: {
        "detail": "Label 'rose' is not one of this model's classes ['setosa', 'versicolor', "
        "'virginica'].",
        "code": "unknown_label",
    },
    429: {
        "detail": "Model 'iris' holds 268435300 bytes of predictions awaiting their label; "
        "these 1 would take 205 more, past its limit of 268435456 "
        "(PERCEPTRON_MAX_PENDING_BYTES). Send feedback for pending predictions, lower the "
        "model's feedback_ttl_s, or retry after 3600 s, when the oldest lapse.",
        "code": "too_many_pending",
    },
    503: {
        "detail": "The model store is not answering; retry shortly.",
        "code": "store_unavailable",
    },
}
# A real export of ``iris`` (its checksum holds): importing it creates that model.
EXPORT: dict[str, Any] = {
    "format": "perceptron-model",
    "format_version": 1,
    "name": "iris",
    "config": CONFIG,
    "created": 1795534158,
    "version": 6,
    "seen": 7,
    "counters": {
        "cm:2:1": "2",
        "cm:0:0": "1",
        "cm:2:0": "1",
        "cm:1:2": "2",
        "cm:0:1": "1",
        "mistakes": "6",
        "learned": "6",
        "r2": "92.83",
        "predictions": "3",
        "feedback": "1",
        "duplicates": "1",
    },
    "weights": "zMzMzMzMAMCgmZmZmZnJv2dmZmZmZgrAMzMzMzMz87+amZmZmZkdQJqZmZmZmQlAaGZmZmZmBkA0MzMz"
    "MzPTvzQzMzMzMxXAAAAAAAAACMDw///////fP/////////c/AAAAAAAAAAAAAAAAAADwPwAAAAAAAPC/",
    "sha256": "9d5c72889f38874c4764be7cc433fd570b4dda28757fe681aa75824aa53a4472",
}

# --- requests --------------------------------------------------------------------------------

MODEL_SPEC: list[dict[str, Any]] = [
    {"classes": ["setosa", "versicolor", "virginica"], "n_features": 4},
    {"classes": ["ham", "spam"], "hash_bits": 20, "averaged": True},
]
PREDICT_REQUEST: list[dict[str, Any]] = [
    {"model": "iris", "features": [6.1, 2.8, 4.7, 1.2]},
    {"model": "default", "features": {"word=free": 1, "word=offer": 1, "length": 0.3}},
]
FEEDBACK_REQUEST: list[dict[str, Any]] = [{"prediction_id": PREDICTION_ID, "label": "versicolor"}]
LEARN_REQUEST: list[dict[str, Any]] = [
    {"model": "iris", "features": [5.8, 2.7, 5.1, 1.9], "label": "virginica"},
    {"model": "default", "features": {"word=free": 1, "length": 0.8}, "label": 1},
]
PREDICT_BATCH_REQUEST: list[dict[str, Any]] = [
    {"model": "iris", "features": [[5.0, 3.4, 1.5, 0.2], [6.9, 3.1, 5.4, 2.1]]},
    # the same two examples as little-endian float64, base64-encoded
    {
        "model": "iris",
        "packed_features": "AAAAAAAAFEAzMzMzMzMLQAAAAAAAAPg/mpmZmZmZyT+amZmZmZkbQM3MzMzMzAhAmpm"
        "ZmZmZFUDNzMzMzMwAQA==",
    },
]
FEEDBACK_BATCH_REQUEST: list[dict[str, Any]] = [
    {
        "feedback": [
            {"prediction_id": "iris:AaIOLaUZSVQeK0pCYwFsjc2w", "label": "setosa"},
            {"prediction_id": "iris:AaIOLakBhhc_UDza9lVZEyy3", "label": "virginica"},
        ]
    }
]
LEARN_BATCH_REQUEST: list[dict[str, Any]] = [
    {
        "model": "iris",
        "features": [[5.1, 3.5, 1.4, 0.2], [7.0, 3.2, 4.7, 1.4], [6.3, 3.3, 6.0, 2.5]],
        "labels": ["setosa", "versicolor", "virginica"],
    }
]

# --- answers ---------------------------------------------------------------------------------

PREDICT_RESPONSE: list[dict[str, Any]] = [PREDICTION, BINARY_PREDICTION]
PREDICT_BATCH_RESPONSE: list[dict[str, Any]] = [
    {
        "predictions": [
            {
                "prediction_id": "iris:AaIOLaUZSVQeK0pCYwFsjc2w",
                "label": "virginica",
                "score": None,
                "scores": {"setosa": -16.37, "versicolor": 4.71, "virginica": 11.66},
                "version": 5,
            },
            {
                "prediction_id": "iris:AaIOLakBhhc_UDza9lVZEyy3",
                "label": "virginica",
                "score": None,
                "scores": {"setosa": -35.45, "versicolor": -3.2, "virginica": 38.65},
                "version": 5,
            },
        ],
        "version": 5,
    }
]
FEEDBACK_RESPONSE: list[dict[str, Any]] = [FEEDBACK, {**FEEDBACK, "duplicate": True}]
FEEDBACK_BATCH_RESPONSE: list[dict[str, Any]] = [
    {
        "results": [
            {**FEEDBACK, "error": None},
            {
                "mistake": None,
                "updated": None,
                "version": None,
                "duplicate": None,
                "error": {
                    "detail": "This label came 3512.4 s after its prediction's wait of 86400 s "
                    "(the model's feedback_ttl_s) ran out: the prediction no longer takes a "
                    "label.",
                    "code": "prediction_expired",
                },
            },
        ]
    }
]
LEARN_RESPONSE: list[dict[str, Any]] = [
    {"label": "versicolor", "mistake": True, "updated": True, "version": 5}
]
LEARN_BATCH_RESPONSE: list[dict[str, Any]] = [
    {
        "labels": ["setosa", "setosa", "versicolor"],
        "mistakes": [False, True, True],
        "updated": [False, True, True],
        "version": 2,
        "mistake_count": 2,
    }
]
MODEL_INFO_EXAMPLES: list[dict[str, Any]] = [MODEL_INFO]

MODEL_LIST: list[dict[str, Any]] = [
    {
        "models": [
            {
                "name": "default",
                "config": {**CONFIG, "classes": [-1, 1], "n_features": None},
                "version": 0,
                "created": 1795534150,
                "counters": dict.fromkeys(COUNTERS, 0),
            },
            MODEL_INFO,
        ]
    }
]
WEIGHTS: list[dict[str, Any]] = [
    {
        "model": "iris",
        "version": 6,
        "seen": 7,
        "rows": [
            {"target": "setosa", "weights": [-2.1, -0.2, -3.3, -1.2], "bias": 0.0},
            {"target": "versicolor", "weights": [7.4, 3.2, 2.8, -0.3], "bias": 1.0},
            {"target": "virginica", "weights": [-5.3, -3.0, 0.5, 1.5], "bias": -1.0},
        ],
        "averaged": None,
    },
    # named features: the non-zero buckets, by index
    {
        "model": "default",
        "version": 1,
        "seen": 1,
        "rows": [{"target": "1", "weights": {"106162": 0.8, "124424": 1.0}, "bias": 1.0}],
        "averaged": None,
    },
]
METRICS: list[dict[str, Any]] = [
    {
        "model": "iris",
        "version": 6,
        "counters": COUNTERS,
        "mistake_rate": {
            "cumulative": 0.857,
            "last_100": 0.857,
            "last_1000": 0.857,
            "last_100_examples": 7,
            "last_1000_examples": 7,
        },
        "series": {
            "bucket_s": 10,
            "points": [
                {
                    "t": 1795534150,
                    "examples": 7,
                    "mistakes": 6,
                    "rate": 0.857,
                    "examples_total": 7,
                    "mistakes_total": 6,
                }
            ],
        },
        "curve": {
            "every": 2,
            "points": [
                {"examples": 2, "mistakes": 1, "rate": 0.5},
                {"examples": 4, "mistakes": 3, "rate": 0.75},
                {"examples": 6, "mistakes": 5, "rate": 0.833},
            ],
        },
        "confusion": {
            "labels": ["setosa", "versicolor", "virginica"],
            "matrix": [[1, 0, 1], [1, 0, 2], [0, 2, 0]],
        },
        "weight_norm": 11.46,
        "max_feature_norm": 9.63,
        "mistake_bound": {
            "estimate": True,
            "applies": False,
            "reason": "binary, non-averaged models only",
            "mistakes": 6,
            "window": 7,
            "R": None,
            "gamma": None,
            "bound": None,
            "separable": None,
        },
        "sources": [{"source": "labeller", "labelled": 7, "mistakes": 6, "updates": 6}],
        "labels": {
            "median_s": 42.0,
            "p95_s": 310.0,
            "counted": 7,
            "defaulted_share": 0.0,
            "awaiting_default": 0,
        },
    }
]
HEALTH: list[dict[str, Any]] = [{"status": "ok", "store": "up"}, {"status": "ok", "store": None}]

# An excerpt of GET /metrics (the Prometheus text format).
PROMETHEUS = "\n".join(
    [
        "# HELP perceptron_model_seen_total Labelled examples (feedback and learned).",
        "# TYPE perceptron_model_seen_total counter",
        'perceptron_model_seen_total{model="iris"} 7.0',
        "# HELP perceptron_model_mistakes_total Served labels that were wrong.",
        "# TYPE perceptron_model_mistakes_total counter",
        'perceptron_model_mistakes_total{model="iris"} 6.0',
        "# HELP perceptron_model_mistake_rate Mistake rate over all labelled examples, or the "
        "last 100 or 1000.",
        "# TYPE perceptron_model_mistake_rate gauge",
        'perceptron_model_mistake_rate{model="iris",window="all"} 0.857',
        'perceptron_model_mistake_rate{model="iris",window="100"} 0.857',
        "# HELP perceptron_http_requests_total HTTP requests answered, by route template, "
        "method and status.",
        "# TYPE perceptron_http_requests_total counter",
        'perceptron_http_requests_total{method="POST",route="/learn",status="200"} 6.0',
        "# HELP perceptron_ready 1 when this replica is ready (GET /readyz answers 200: Redis "
        "answers, evicts no model and has memory left), else 0.",
        "# TYPE perceptron_ready gauge",
        "perceptron_ready 1.0",
        "",
    ]
)

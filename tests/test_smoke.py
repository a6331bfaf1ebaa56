import httpx
import pytest

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def test_default_model_predicts_and_learns(client: httpx.Client) -> None:
    r = client.post("/predict", json={"features": {"a": 1.0}})
    assert r.status_code == 200
    body = r.json()
    assert body["label"] == -1 and body["version"] == 0
    f = client.post("/feedback", json={"prediction_id": body["prediction_id"], "label": 1})
    assert f.json() == {"mistake": True, "updated": True, "version": 1, "duplicate": False}

"""Scale-out on Dask (optional extra ``dask``): batch inference over Dask collections (predictions, features,
pretrained embeddings) and a hyper-parameter search through joblib's Dask backend, on a 2-worker
``distributed.LocalCluster``."""

import joblib
import numpy as np
import pytest
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from attnkit import RandomFourierFeatures, TransformerClassifier, TransformerEmbedder
from attnkit.datasets import make_negation_sentences
from tiny_bert import write_tiny_bert

da = pytest.importorskip("dask.array", reason="dask is not installed (pip install 'attnkit[dask]')")
db = pytest.importorskip("dask.bag", reason="dask is not installed (pip install 'attnkit[dask]')")
distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install 'attnkit[dask]')")

TINY = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=2, early_stopping=False, random_state=0)


@pytest.fixture(scope="module")
def client():
    # Worker processes (not threads): each imports attnkit itself, as on a real cluster.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 6))
    return X, (np.sum(X**2, axis=1) > 6).astype(int)


def test_map_partitions_over_a_bag_of_texts(client):
    texts, labels = make_negation_sentences(300, random_state=0)
    clf = TransformerClassifier(**TINY).fit(texts, labels)
    bag = db.from_sequence(texts, npartitions=4)
    predicted = bag.map_partitions(lambda part: clf.predict(list(part)).tolist()).compute()
    np.testing.assert_array_equal(predicted, clf.predict(texts))


def test_map_blocks_over_a_dask_array(client, points):
    X, _ = points
    rff = RandomFourierFeatures(32, random_state=0).fit(X)
    lazy = da.from_array(X, chunks=(100, -1)).map_blocks(rff.transform, chunks=(100, 32), dtype=np.float64)
    np.testing.assert_array_equal(lazy.compute(), rff.transform(X))


def test_parallel_post_fit(client, points):
    wrappers = pytest.importorskip("dask_ml.wrappers", reason="dask-ml is not installed (pip install 'attnkit[dask]')")
    X, y = points
    model = wrappers.ParallelPostFit(make_pipeline(RandomFourierFeatures(64, random_state=0), RidgeClassifier()))
    model.fit(X, y)
    predicted = model.predict(da.from_array(X, chunks=(100, -1)))
    assert isinstance(predicted, da.Array)
    np.testing.assert_array_equal(predicted.compute(), model.estimator.predict(X))


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    pytest.importorskip("tokenizers", reason="pretrained models need the extra (pip install 'attnkit[pretrained]')")
    pytest.importorskip("safetensors", reason="pretrained models need the extra (pip install 'attnkit[pretrained]')")
    # The workers get the fitted embedder (weights and tokenizer), never the checkpoint's path.
    return TransformerEmbedder(write_tiny_bert(tmp_path_factory.mktemp("tiny") / "tiny-bert")).fit()


def test_embeddings_of_a_bag_of_texts(client, embedder):
    texts, _ = make_negation_sentences(300, random_state=0)
    bag = db.from_sequence(texts, npartitions=4)
    rows = bag.map_partitions(lambda part: list(embedder.transform(list(part)))).compute()
    np.testing.assert_array_equal(np.stack(rows), embedder.transform(texts))


def test_embeddings_of_a_dask_array(client, embedder):
    wrappers = pytest.importorskip("dask_ml.wrappers", reason="dask-ml is not installed (pip install 'attnkit[dask]')")
    texts, _ = make_negation_sentences(300, random_state=0)
    expected = embedder.transform(texts)
    lazy = da.from_array(np.array(texts, dtype=object)[:, None], chunks=(75, 1))  # one column of texts
    width = expected.shape[1]
    embedded = lazy.map_blocks(embedder.transform, chunks=(75, width), dtype=np.float32)
    assert embedded.shape == expected.shape
    np.testing.assert_array_equal(embedded.compute(), expected)
    # dask-ml infers the output's meta by calling transform on numbers, which an embedder refuses, so it is
    # given; ParallelPostFit also keeps the input's chunk shape in the graph (here (300, 1), for (300, 16)
    # blocks): the computed array is right, but slice it after compute, or use map_blocks as above.
    model = wrappers.ParallelPostFit(embedder, transform_meta=np.empty((0, width), dtype=np.float32))
    embedded = model.transform(lazy)
    assert isinstance(embedded, da.Array)
    np.testing.assert_array_equal(embedded.compute(), expected)


def test_grid_search_on_the_dask_joblib_backend(client, points):
    X, y = points
    search = GridSearchCV(make_pipeline(RandomFourierFeatures(64, random_state=0), RidgeClassifier()),
                          {"randomfourierfeatures__gamma": [0.05, 0.2, 1.0]}, cv=3, n_jobs=-1)
    with joblib.parallel_backend("dask"):
        search.fit(X, y)
    serial = GridSearchCV(search.estimator, search.param_grid, cv=3).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])
    texts, labels = make_negation_sentences(200, random_state=0)
    with joblib.parallel_backend("dask"):
        text_search = GridSearchCV(TransformerClassifier(**TINY), {"d_model": [8, 16]}, cv=2, n_jobs=-1)
        text_search.fit(texts, labels)
    assert text_search.best_params_["d_model"] in (8, 16)

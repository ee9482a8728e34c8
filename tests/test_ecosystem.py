"""The estimators inside scikit-learn's composition tools: Pipeline, ColumnTransformer,
GridSearchCV with two loky worker processes, and cross_val_score."""

import numpy as np
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, RidgeClassifier
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import FeatureUnion, make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from attnkit import RandomFourierFeatures, Seq2SeqTransformer, TransformerClassifier
from attnkit.datasets import make_case_pairs, make_negation_sentences

TINY_CLASSIFIER = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=2, early_stopping=False, random_state=0)
TINY_SEQ2SEQ = dict(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_iter=1,
                    early_stopping=False, random_state=0)


@pytest.fixture(scope="module")
def sentences():
    texts, labels = make_negation_sentences(240, random_state=0)
    return np.array(texts, dtype=object), labels


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 5))
    return X, (np.sum(X**2, axis=1) > 5).astype(int)


def test_pipelines(sentences, points):
    texts, labels = sentences
    rff = make_pipeline(StandardScaler(), RandomFourierFeatures(128, random_state=0), RidgeClassifier()).fit(*points)
    assert rff.score(*points) > 0.8
    # The classifier's pooled sentence vectors feed another estimator.
    embed = make_pipeline(TransformerClassifier(**TINY_CLASSIFIER), LogisticRegression())
    embed.fit(texts, labels)
    assert embed.predict(texts[:5]).shape == (5,)
    # Beside a bag-of-words model, in a FeatureUnion.
    union = FeatureUnion([("tfidf", TfidfVectorizer()), ("embed", TransformerClassifier(**TINY_CLASSIFIER))])
    union = make_pipeline(union, LogisticRegression())
    assert union.fit(texts, labels).predict(texts[:3]).shape == (3,)
    sources, targets = make_case_pairs(60, random_state=0)
    seq2seq = make_pipeline(FunctionTransformer(lambda x: [s.strip() for s in x]), Seq2SeqTransformer(**TINY_SEQ2SEQ))
    seq2seq.fit(sources, targets)
    assert len(seq2seq.predict(sources[:4])) == 4


def test_column_transformer_routes_a_text_column_to_the_classifier(sentences):
    texts, labels = sentences
    rng = np.random.default_rng(0)
    table = np.empty((len(texts), 2), dtype=object)
    table[:, 0] = texts
    table[:, 1] = rng.standard_normal(len(texts))
    features = ColumnTransformer([("text", TransformerClassifier(**TINY_CLASSIFIER), 0),
                                  ("number", StandardScaler(), [1])])
    # A 1-element column selector (0, not [0]) hands the classifier a 1-D column of strings; it
    # needs labels, so it is fitted through a Pipeline whose final step sees them.
    model = make_pipeline(features, LogisticRegression()).fit(table, labels)
    assert model.named_steps["columntransformer"].transform(table).shape == (len(texts), 2 + 1)
    assert model.predict(table[:5]).shape == (5,)


def test_grid_search_with_two_worker_processes(sentences, points):
    texts, labels = sentences
    search = GridSearchCV(TransformerClassifier(**TINY_CLASSIFIER), {"d_model": [8, 16]}, cv=2, n_jobs=2)
    search.fit(texts, labels)
    assert search.best_params_["d_model"] in (8, 16) and len(search.cv_results_["mean_test_score"]) == 2
    assert search.predict(texts[:4]).shape == (4,)
    rff = GridSearchCV(make_pipeline(RandomFourierFeatures(random_state=0), RidgeClassifier()),
                       {"randomfourierfeatures__gamma": [0.1, 1.0]}, cv=2, n_jobs=2).fit(*points)
    assert rff.best_score_ > 0.6
    sources, targets = make_case_pairs(60, random_state=0)
    seq = GridSearchCV(Seq2SeqTransformer(**TINY_SEQ2SEQ), {"learning_rate": [1e-3, 3e-3]}, cv=2, n_jobs=2)
    seq.fit(sources, targets)
    assert seq.best_params_["learning_rate"] in (1e-3, 3e-3)


def test_cross_val_score(sentences, points):
    texts, labels = sentences
    folds = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(TransformerClassifier(**TINY_CLASSIFIER), texts, labels, cv=folds)
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    rff = cross_val_score(make_pipeline(RandomFourierFeatures(128, random_state=0), RidgeClassifier()), *points, cv=3)
    assert np.all(rff > 0.6)
    sources, targets = make_case_pairs(60, random_state=0)
    seq = cross_val_score(Seq2SeqTransformer(**TINY_SEQ2SEQ), sources, targets, cv=2)
    assert seq.shape == (2,) and np.all((0 <= seq) & (seq <= 1))


def test_column_transformer_on_a_dataframe(sentences):
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    texts, labels = sentences
    frame = pd.DataFrame({"review": list(texts), "stars": np.arange(len(texts)) % 5})  # pandas 3: a str column
    features = ColumnTransformer([("text", TransformerClassifier(**TINY_CLASSIFIER), "review"),
                                  ("number", StandardScaler(), ["stars"])])
    model = make_pipeline(features, LogisticRegression()).fit(frame, labels)
    assert model.predict(frame.iloc[:5]).shape == (5,)

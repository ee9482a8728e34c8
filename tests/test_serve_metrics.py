"""attnkit.serve.metrics: Prometheus' text exposition format, written by hand."""

from attnkit.serve.metrics import Counter, Gauge, Histogram, Metrics


def test_counters_gauges_and_histograms_render_as_prometheus_reads_them():
    counter = Counter("c_total", "A count.")
    counter.inc(route="/x", status=200)
    counter.inc(2, route="/x", status=200)
    assert counter.render() == ["# HELP c_total A count.", "# TYPE c_total counter",
                                'c_total{route="/x",status="200"} 3']
    gauge = Gauge("g", "A level.")
    gauge.set(4)
    assert gauge.render()[-1] == "g 4"
    histogram = Histogram("h", "Sizes.", (1, 10))
    for value in (0.5, 1, 5, 50):
        histogram.observe(value)
    assert histogram.render()[2:] == ['h_bucket{le="1"} 2', 'h_bucket{le="10"} 3', 'h_bucket{le="+Inf"} 4',
                                      "h_sum 56.5", "h_count 4"]


def test_label_values_are_escaped_and_an_unused_counter_reads_zero():
    counter = Counter("c_total", "A count.")
    assert counter.render()[-1] == "c_total 0"
    counter.inc(route='a"b\\c\nd')
    assert counter.render()[-1] == 'c_total{route="a\\"b\\\\c\\nd"} 1'


def test_every_metric_has_help_and_type():
    text = Metrics().render()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert {"attnkit_requests_total", "attnkit_request_duration_seconds", "attnkit_batch_size", "attnkit_queue_depth",
            "attnkit_tokens_total", "attnkit_queue_rejected_total", "attnkit_streams_cancelled_total"} <= names
    assert len(names) == text.count("# HELP")

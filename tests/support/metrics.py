"""Reading a scrape of Prometheus metrics: one sample's value, or a sum over some labels."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """The samples of one scrape in the text exposition format."""

    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls(
            [
                (sample.name, sample.labels, sample.value)
                for family in text_string_to_metric_families(text)
                for sample in family.samples
            ]
        )

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named `name` whose labels include `labels` (0: none)."""
        return sum(
            value
            for sample, sample_labels, value in self.samples
            if sample == name and labels.items() <= sample_labels.items()
        )

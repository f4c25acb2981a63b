"""Scraping Prometheus metrics over HTTP, and reading one sample or a sum over some labels."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
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


async def scrape(url: str, headers: dict[str, str] | None = None) -> Scrape:
    """The metrics `url` serves, as Prometheus would scrape them."""
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url, headers=headers)
    assert response.status_code == 200, f"GET {url}: {response.status_code} {response.text}"
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape.parse(response.text)

"""The offline model's vocabulary: the words it skips, the words that ask for a tool,
the parameter names it knows the meaning of, and the places it knows the time zone of
(cities, countries, and IANA names written out)."""

from __future__ import annotations

import re
import zoneinfo
from functools import cache

WORD = re.compile(r"[A-Za-z0-9_']+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "with",
        "about",
        "as",
        "into",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "do",
        "does",
        "did",
        "what",
        "whats",
        "what's",
        "which",
        "who",
        "whom",
        "how",
        "when",
        "where",
        "why",
        "it",
        "its",
        "it's",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "me",
        "my",
        "mine",
        "i",
        "you",
        "your",
        "we",
        "our",
        "us",
        "please",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "let",
        "lets",
        "let's",
        "tell",
        "show",
        "give",
        "get",
        "find",
        "list",
        "me",
        "now",
        "some",
        "any",
        "all",
        "just",
        "up",
        "out",
        "over",
        "tell",
        "know",
    ]
)
FILLERS = frozenset(
    [
        "that",
        "about",
        "for",
        "my",
        "the",
        "a",
        "an",
        "please",
        "of",
        "on",
        "in",
        "to",
        "me",
        "is",
        "it",
    ]
)
# Words that ask for a tool before the words that are its argument ("please make a note
# that ..."); the tool's own name words count too.
POLITE = frozenset(
    ["please", "kindly", "just", "can", "could", "would", "will", "you", "i", "want", "need", "to"]
)
REQUEST_VERBS = frozenset(
    [
        "note",
        "record",
        "remember",
        "save",
        "store",
        "write",
        "jot",
        "add",
        "make",
        "take",
        "create",
        "keep",
        "log",
        "down",
    ]
)
ARTICLES = frozenset(["a", "an", "the", "my", "this"])
CONNECTORS = frozenset(["that", "saying", "about", "this"])
REFERENCE = re.compile(r"\b(?:that|it|this|the (?:last |same )?(?:one|note|title))\b", re.I)

TITLE_PARAMS = frozenset({"title", "subject", "name", "summary", "heading"})
BODY_PARAMS = frozenset({"body", "details", "content", "text", "description", "note", "message"})
QUERY_PARAMS = frozenset({"query", "q", "search", "term", "keyword", "keywords", "pattern"})
TIMEZONE_PARAMS = frozenset({"timezone", "tz", "time_zone", "zone"})
# Words that ask for something to be destroyed; a tool named with one is only called when asked.
DESTRUCTIVE_VERBS = frozenset(
    ["delete", "remove", "erase", "destroy", "drop", "purge", "clear", "forget", "discard"]
)
# Words that point back at what was just listed ("delete them").
PLURAL_REFERENCE = frozenset(
    ["them", "those", "these", "they", "all", "both", "every", "everything", "ones", "one"]
)
# The cities people ask the time of, by their IANA time zones.
CITY_ZONES = {
    "london": "Europe/London",
    "dublin": "Europe/Dublin",
    "lisbon": "Europe/Lisbon",
    "paris": "Europe/Paris",
    "berlin": "Europe/Berlin",
    "madrid": "Europe/Madrid",
    "barcelona": "Europe/Madrid",
    "rome": "Europe/Rome",
    "milan": "Europe/Rome",
    "amsterdam": "Europe/Amsterdam",
    "brussels": "Europe/Brussels",
    "zurich": "Europe/Zurich",
    "geneva": "Europe/Zurich",
    "vienna": "Europe/Vienna",
    "prague": "Europe/Prague",
    "warsaw": "Europe/Warsaw",
    "stockholm": "Europe/Stockholm",
    "oslo": "Europe/Oslo",
    "copenhagen": "Europe/Copenhagen",
    "helsinki": "Europe/Helsinki",
    "athens": "Europe/Athens",
    "istanbul": "Europe/Istanbul",
    "moscow": "Europe/Moscow",
    "kyiv": "Europe/Kyiv",
    "cairo": "Africa/Cairo",
    "lagos": "Africa/Lagos",
    "nairobi": "Africa/Nairobi",
    "johannesburg": "Africa/Johannesburg",
    "dubai": "Asia/Dubai",
    "mumbai": "Asia/Kolkata",
    "new delhi": "Asia/Kolkata",
    "delhi": "Asia/Kolkata",
    "bangalore": "Asia/Kolkata",
    "bangkok": "Asia/Bangkok",
    "jakarta": "Asia/Jakarta",
    "singapore": "Asia/Singapore",
    "hong kong": "Asia/Hong_Kong",
    "shanghai": "Asia/Shanghai",
    "beijing": "Asia/Shanghai",
    "manila": "Asia/Manila",
    "seoul": "Asia/Seoul",
    "tokyo": "Asia/Tokyo",
    "sydney": "Australia/Sydney",
    "melbourne": "Australia/Melbourne",
    "brisbane": "Australia/Brisbane",
    "perth": "Australia/Perth",
    "auckland": "Pacific/Auckland",
    "honolulu": "Pacific/Honolulu",
    "anchorage": "America/Anchorage",
    "los angeles": "America/Los_Angeles",
    "san francisco": "America/Los_Angeles",
    "seattle": "America/Los_Angeles",
    "vancouver": "America/Vancouver",
    "denver": "America/Denver",
    "chicago": "America/Chicago",
    "mexico city": "America/Mexico_City",
    "new york": "America/New_York",
    "boston": "America/New_York",
    "washington": "America/New_York",
    "toronto": "America/Toronto",
    "montreal": "America/Toronto",
    "bogota": "America/Bogota",
    "lima": "America/Lima",
    "santiago": "America/Santiago",
    "buenos aires": "America/Argentina/Buenos_Aires",
    "sao paulo": "America/Sao_Paulo",
    "são paulo": "America/Sao_Paulo",
    "rio de janeiro": "America/Sao_Paulo",
}
# Countries (and a few regions) by the zone of their capital or largest city.
COUNTRY_ZONES = {
    "utc": "UTC",
    "gmt": "UTC",
    "uk": "Europe/London",
    "england": "Europe/London",
    "britain": "Europe/London",
    "scotland": "Europe/London",
    "ireland": "Europe/Dublin",
    "portugal": "Europe/Lisbon",
    "france": "Europe/Paris",
    "germany": "Europe/Berlin",
    "spain": "Europe/Madrid",
    "italy": "Europe/Rome",
    "netherlands": "Europe/Amsterdam",
    "belgium": "Europe/Brussels",
    "switzerland": "Europe/Zurich",
    "austria": "Europe/Vienna",
    "czechia": "Europe/Prague",
    "poland": "Europe/Warsaw",
    "sweden": "Europe/Stockholm",
    "norway": "Europe/Oslo",
    "denmark": "Europe/Copenhagen",
    "finland": "Europe/Helsinki",
    "greece": "Europe/Athens",
    "turkey": "Europe/Istanbul",
    "russia": "Europe/Moscow",
    "ukraine": "Europe/Kyiv",
    "egypt": "Africa/Cairo",
    "nigeria": "Africa/Lagos",
    "kenya": "Africa/Nairobi",
    "south africa": "Africa/Johannesburg",
    "india": "Asia/Kolkata",
    "thailand": "Asia/Bangkok",
    "indonesia": "Asia/Jakarta",
    "china": "Asia/Shanghai",
    "philippines": "Asia/Manila",
    "korea": "Asia/Seoul",
    "south korea": "Asia/Seoul",
    "japan": "Asia/Tokyo",
    "australia": "Australia/Sydney",
    "new zealand": "Pacific/Auckland",
    "hawaii": "Pacific/Honolulu",
    "alaska": "America/Anchorage",
    "canada": "America/Toronto",
    "mexico": "America/Mexico_City",
    "colombia": "America/Bogota",
    "peru": "America/Lima",
    "chile": "America/Santiago",
    "argentina": "America/Argentina/Buenos_Aires",
    "brazil": "America/Sao_Paulo",
}
# Words that open a request of their own within a longer message.
OPENERS = frozenset(
    [
        "what",
        "whats",
        "what's",
        "how",
        "when",
        "which",
        "who",
        "where",
        "is",
        "are",
        "can",
        "could",
        "would",
        "please",
        "tell",
        "show",
        "list",
        "give",
        "find",
        "search",
        "look",
        "note",
        "record",
        "remember",
        "save",
        "write",
        "jot",
        "calculate",
        "compute",
        "evaluate",
        "work",
        "multiply",
        "divide",
        "add",
        "subtract",
        "double",
        "triple",
        "halve",
        "square",
        "cube",
        "generate",
        "make",
        "create",
        "delete",
        "remove",
        "get",
        "convert",
    ]
)

_PLACE_ZONES = {**COUNTRY_ZONES, **CITY_ZONES}
_PLACE = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _PLACE_ZONES), key=len, reverse=True)) + r")\b", re.I
)
# An IANA name as written: "Europe/Paris", "America/Argentina/Buenos_Aires".
_IANA = re.compile(r"\b[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_\-]+)+")


@cache
def _iana_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def zone_mentions(text: str) -> list[tuple[int, int, str]]:
    """Where the text names a time zone: (start, end, IANA name), in order.

    An IANA name written out counts as itself; a city or a country as its zone.
    """
    found = [(m.start(), m.end(), m.group(0)) for m in _IANA.finditer(text)]
    found = [(start, end, name) for start, end, name in found if name in _iana_names()]
    for match in _PLACE.finditer(text):
        if not any(start <= match.start() < end for start, end, _ in found):
            zone = _PLACE_ZONES[match.group(1).lower()]
            found.append((match.start(), match.end(), zone))
    return sorted(found)


def city_zones(text: str) -> list[str]:
    """The IANA time zones of the places the text names, in order, each once."""
    return list(dict.fromkeys(zone for _, _, zone in zone_mentions(text)))


def destroys(tool_name: str) -> bool:
    """True for a tool named for deleting or removing (`delete_notes`, `files__remove`)."""
    return bool(set(re.split(r"[_\-\s]+", tool_name.lower())) & DESTRUCTIVE_VERBS)

"""The embedded offline model: deterministic, no network, good enough for the demo tools.

It reads a request the way a real model would and answers through the same
provider interface, so that every feature can be seen on a fresh machine.
Each module holds one rule:

- provider.py: what to answer where the conversation stands, streamed, with usage;
- requests.py: a message cut into requests, and a step's calls planned from them;
- choosing.py: the tool a request asks for (and search before delete);
- arguments.py: a tool's arguments filled from its JSON Schema and the words;
- kinds.py: the parameters read apart (a time zone, a time of day, ids) and their values;
- codes.py: the code a request names a string parameter by ("order A-7");
- structured.py: a JSON value for any schema (a `response_format`, a forced call's arguments);
- reading.py: the words as meant: plain text, arithmetic, stems;
- history.py: what the conversation gave: the user's words, results, numbers, ids;
- answers.py: the answer written from tool results, or when no tool fits;
- suggestions.py: the follow-up prompts after a turn;
- words.py: the vocabulary: words skipped, words that ask, places and their zones.
"""

from chat.llm.offline.provider import OfflineProvider, token_count

__all__ = ["OfflineProvider", "token_count"]

"""The production storage of static files: hashed names, compressed, imports rewritten."""

from __future__ import annotations

from servestatic.storage import CompressedManifestStaticFilesStorage


class ManifestStaticFilesStorage(CompressedManifestStaticFilesStorage):
    """ServeStatic's manifest storage, which also rewrites the chat page's module imports.

    `collectstatic` names each file by its hash (`chat.5d41402abc4b.js`), and
    the page asks for that name; but the modules import each other by their own
    names (`import { reduce } from "./state.js";`). Django leaves those alone
    unless told to rewrite them, and then a hashed chat.js would load the
    unhashed state.js: found (collectstatic keeps both names), but cached apart
    from the page, so that after a deploy a browser could run new and old
    modules together. Rewritten, each hashed module imports the hashed others.
    """

    support_js_module_import_aggregation = True

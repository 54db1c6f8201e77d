"""The user documentation. Installed as `attndsl.docs` for its language reference
(LANGUAGE.md), which the language server's hover reads."""

"""Views: pure renderers of the redacted report document (terminal, HTML, JUnit); they format
what the document says and compute or judge nothing of their own."""

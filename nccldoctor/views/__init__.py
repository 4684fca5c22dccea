"""Views: pure renderers of a Report (terminal, HTML, JUnit). They compute nothing of their own."""

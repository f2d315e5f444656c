"""The REST API at /api/v1/ (DESIGN.md section 7): thin views over chat.services and chat.selectors."""

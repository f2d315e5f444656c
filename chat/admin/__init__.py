"""The admin: importing its modules registers every chat model, and brands the site."""

from django.contrib import admin

from chat.admin import conversations, policies, runs, trail

admin.site.site_header = "toolchat administration"
admin.site.site_title = "toolchat admin"
admin.site.index_title = "Conversations, runs and their audit trail"
# The app list is on the index page and in the breadcrumbs; without the sidebar beside
# every list, the lists have the width they need (the messages' latency and tokens at 1280 px).
admin.site.enable_nav_sidebar = False

__all__ = ["conversations", "policies", "runs", "trail"]

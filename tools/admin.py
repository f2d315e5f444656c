from django.contrib import admin

from tools.models import Resource

admin.site.register(Resource)

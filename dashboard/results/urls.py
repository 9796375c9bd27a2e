from django.urls import path

from results import views

urlpatterns = [
    path("", views.index, name="index"),
    path("grid/<str:namespace>/<str:name>/", views.grid_page, name="grid"),
    path("pair/<str:source>/<str:destination>/", views.pair_page, name="pair"),
    path("compare/<str:namespace>/<str:name>/", views.compare_page, name="compare"),
    path("problems/<str:namespace>/<str:name>/", views.problems_page, name="problems"),
]

"""The settings dialog's own pages and the parts they share.

Each page is a widget in a module of its own (models_page, replies_page, this_model_page,
appearance_page); page_list shows them beside a list of their names. The pages that live
elsewhere (app/ui/servers_page.py, tools_page.py, api_page.py, hardware_page.py) join them
in app/ui/settings_dialog.py, which holds the dialog.
"""
